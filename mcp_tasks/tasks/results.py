"""Result sizing: results are bounded (ARCHITECTURE.md §Results and artifacts).

A `CallToolResult` whose JSON encoding fits the inline cap is stored and returned as is. A larger one
is written to the artifact store, and the task's result becomes a small `CallToolResult` carrying a
`resource_link` to it, readable by the owner through `resources/read`.
"""

from __future__ import annotations

import json
from typing import Final

from mcp_tasks.protocol import constants
from mcp_tasks.protocol.errors import JsonObject

RESULT_ARTIFACT_NAME: Final = "result.json"
RESULT_ARTIFACT_MIME: Final = "application/json"


def error_result(text: str) -> JsonObject:
    """A `CallToolResult` with one text block and `isError: true` (a tool error, SEP-1303)."""
    return {"content": [{"type": "text", "text": text}], "isError": True}


def exited_without_result(tool_name: str, exit_code: int | None, output_tail: str) -> JsonObject:
    """The one outcome of a tool process that ended without posting a result, in every executor.

    The tool ran and ended, so this is the tool's own outcome: the task becomes `completed` with this
    `isError: true` result (SEP-1303: the model can read why), never `failed`, which is kept for what the
    tool never saw (could not start, deadline, lost run). Same text on the embedded runner and on
    Kubernetes; docs/tool-runtime.md states the rule.

    Args:
        tool_name: the tool's MCP name.
        exit_code: the process's exit code (negative: the signal that ended it), `None` when unknown.
        output_tail: the end of what it wrote (stderr locally, the termination message or log tail on
            Kubernetes); empty when there is none.
    """
    how = f"exited with code {exit_code}" if exit_code is not None else "ended"
    text = f"Tool {tool_name!r} {how} without a result"
    return error_result(f"{text}. Its last output:\n{output_tail}" if output_tail else text)


def worker_lost_mid_call(tool_name: str, why: str) -> JsonObject:
    """The one outcome of a synchronous call whose warm worker died after it took the call, in every executor.

    The tool may have done part or all of its work, so neither "call again" nor a silent re-run is safe
    for a tool that is not idempotent: the caller is told the outcome is unknown (docs/tool-runtime.md §7).
    A call no worker took never gets here: it goes to another worker or runs as a hidden task.

    Args:
        tool_name: the tool's MCP name.
        why: what was seen of the loss (the worker's exit, a reset connection), without secrets.
    """
    return error_result(
        f"The warm worker running {tool_name!r} was lost mid-call ({why}); its outcome is unknown, so check "
        "the tool's side effects before calling it again"
    )


def encode(result: JsonObject) -> bytes:
    """Compact UTF-8 JSON of a result, as it would be stored."""
    return json.dumps(result, separators=(",", ":"), ensure_ascii=False).encode()


def artifact_uri(task_id: str, name: str) -> str:
    """`mcptasks://artifacts/<taskId>/<name>`: the URI `resources/read` serves to the task's owner."""
    return f"{constants.ARTIFACT_URI_SCHEME}://artifacts/{task_id}/{name}"


def parse_artifact_uri(uri: str) -> tuple[str, str] | None:
    """`(taskId, name)` from an artifact URI, or `None` when `uri` is not one of ours."""
    prefix = f"{constants.ARTIFACT_URI_SCHEME}://artifacts/"
    if not uri.startswith(prefix):
        return None
    task_id, _, name = uri[len(prefix) :].partition("/")
    if not task_id or not name or "/" in name or name in {".", ".."}:
        return None
    return task_id, name


def linked_result(uri: str, size_bytes: int, is_error: bool) -> JsonObject:
    """The bounded stand-in `CallToolResult` for a result stored as an artifact."""
    return {
        "content": [
            {
                "type": "text",
                "text": f"The result is {size_bytes} bytes, too large to inline; read it with resources/read {uri}",
            },
            {
                "type": "resource_link",
                "uri": uri,
                "name": RESULT_ARTIFACT_NAME,
                "mimeType": RESULT_ARTIFACT_MIME,
                "size": size_bytes,
            },
        ],
        "isError": is_error,
    }
