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
