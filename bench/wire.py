"""The MCP 2026-07-28 requests the benchmark sends, and the checks its answers must pass.

Used by `loadgen` (real server, floor and ceiling all receive exactly these bytes) and `run`.
Every request carries `params._meta` with the protocol version and the tasks extension, and the
`MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` headers. Standard library only.
"""

from __future__ import annotations

import json
from typing import Any, Final

PROTOCOL_VERSION: Final = "2026-07-28"
TASKS_EXTENSION: Final = "io.modelcontextprotocol/tasks"
BENCH_TOOL: Final = "bench_wait"
CREATE_BODY_BYTES: Final = 400
"""Target size of one `tools/call` body, in bytes (the floor receives the same bytes)."""

META: Final[dict[str, Any]] = {
    "io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
    "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS_EXTENSION: {}}},
}


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def headers(method: str, name: str) -> dict[str, str]:
    """The routing headers of one request (SEP-2243): version, method and name."""
    return {
        "Content-Type": "application/json",
        "MCP-Protocol-Version": PROTOCOL_VERSION,
        "Mcp-Method": method,
        "Mcp-Name": name,
    }


def _create_template() -> str:
    """A `tools/call` body with a `%d` hole for the JSON-RPC id, padded to about `CREATE_BODY_BYTES`."""

    def build(label: str) -> str:
        params = {"name": BENCH_TOOL, "arguments": {"label": label, "seconds": 1}, "_meta": META}
        return _dumps({"jsonrpc": "2.0", "id": 1000000, "method": "tools/call", "params": params})

    pad = max(0, CREATE_BODY_BYTES - len(build("")))
    return build("x" * pad).replace('"id":1000000', '"id":%d', 1)


CREATE_TEMPLATE: Final = _create_template()
CREATE_HEADERS: Final = headers("tools/call", BENCH_TOOL)


def create_body(request_id: int) -> bytes:
    """`tools/call` of `bench_wait` (a task-required tool), with JSON-RPC id `request_id`."""
    return (CREATE_TEMPLATE % request_id).encode()


def get_body(request_id: int, task_id: str) -> bytes:
    """`tasks/get` of `task_id`."""
    params = {"taskId": task_id, "_meta": META}
    return _dumps({"jsonrpc": "2.0", "id": request_id, "method": "tasks/get", "params": params}).encode()


def get_headers(task_id: str) -> dict[str, str]:
    """Headers of `tasks/get` (`Mcp-Name` is the taskId)."""
    return headers("tasks/get", task_id)


def _result(status: int, raw: bytes, request_id: int) -> dict[str, Any] | None:
    if status != 200:
        return None
    try:
        answer = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(answer, dict) or answer.get("id") != request_id or "error" in answer:
        return None
    result = answer.get("result")
    return result if isinstance(result, dict) else None


def check_create(status: int, raw: bytes, request_id: int, _task_id: str | None) -> bool:
    """A `CreateTaskResult`: `resultType: "task"`, a 32-hex `taskId`, status `working`."""
    result = _result(status, raw, request_id)
    return (
        result is not None
        and result.get("resultType") == "task"
        and isinstance(result.get("taskId"), str)
        and len(result["taskId"]) == 32
        and result.get("status") == "working"
    )


def check_get(status: int, raw: bytes, request_id: int, task_id: str | None) -> bool:
    """A `GetTaskResult` of the requested (seeded, completed) task."""
    result = _result(status, raw, request_id)
    return (
        result is not None
        and result.get("resultType") == "complete"
        and result.get("taskId") == task_id
        and result.get("status") == "completed"
    )


def check_floor(status: int, raw: bytes, request_id: int, _task_id: str | None) -> bool:
    """The floor's answer: `{"result": {"rowId": ...}}`."""
    result = _result(status, raw, request_id)
    return result is not None and isinstance(result.get("rowId"), str)


def check_echo(status: int, raw: bytes, request_id: int, _task_id: str | None) -> bool:
    """The ceiling's answer: `{"result": {}}` with the request's id."""
    return _result(status, raw, request_id) is not None
