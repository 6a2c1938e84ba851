"""One `tools/call` of the server, and the outcome rule applied to what the server did with it.

- the server's `CallToolResult` → the task's result, verbatim (a handshake-era server's JSON as sent);
- a tool the server runs as its own 2025-11-25 task (`execution.taskSupport`, `TaskMode`) → followed by
  `server_tasks.call_as_task` to its `CallToolResult`, which is then the task's result as above;
- a JSON-RPC error answer → the task `failed` with that error (`ProtocolFailure`);
- the server exits or closes the connection after the call was sent → the one outcome rule: an
  idempotent tool's call is sent again to a fresh server (up to `MAX_SENDS` in all), any other ends
  `completed` + `isError` saying the outcome is unknown;
- the server cannot be started or refuses the handshake (the call never reached it) → `failed`;
- a cancel (SIGTERM of a one-shot bridge, `ToolContext.cancelled` of a warm call) → the pending request
  is abandoned, which sends the server `notifications/cancelled`; the executor stops the bridge after
  `cancelGraceSeconds` (one-shot) and settles the task as cancelled.
"""

from __future__ import annotations

import logging
from typing import Any, Final

import anyio
import mcp_types as types
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import RootModel, ValidationError

from mcp_tasks.bridge import server_tasks
from mcp_tasks.bridge.server_tasks import TaskMode
from mcp_tasks.runtime import ProtocolFailure, text_result

logger = logging.getLogger("mcp_tasks.bridge")

Json = dict[str, Any]
MAX_SENDS: Final = 3
"""Most times an idempotent tool's call is sent, to a fresh server each time, when servers keep dying."""
_Raw = RootModel[dict[str, Any]]
"""A result kept as the server sent it (after the SDK's own checks of its era)."""


class ServerLost(Exception):
    """The server exited or closed the connection while a call was in flight (its outcome is unknown)."""


class ServerUnavailable(Exception):
    """The server could not be started or refused the handshake: no call reached it."""


def _closed(exc: MCPError) -> bool:
    """Tell whether this is the SDK's own "the connection closed" outcome (not an error the server answered)."""
    return exc.error.code == types.CONNECTION_CLOSED and exc.error.message == "Connection closed"


async def call_tool(client: Client, name: str, arguments: Json, progress: Any, mode: TaskMode | None = None) -> Json:
    """Send `tools/call` and return the `CallToolResult` JSON.

    A handshake-era (2025-06-18, 2025-11-25) server's result is returned as it sent it (after the SDK's
    checks). A 2026-07-28 server goes through `Client.call_tool`, which also drives its multi-round-trip
    input requests through the same callbacks; its result is the model's fields that were set. With a
    `mode` the server can honour (`server_tasks.augmented`), the call runs as the server's task.

    Raises:
        ServerLost: the connection closed before the answer.
        ProtocolFailure: the server answered with a JSON-RPC error, or with something that is not a
            `CallToolResult` (code -32603).
    """
    session = client.session
    try:
        if mode is not None and server_tasks.augmented(
            mode.support, session.protocol_version, session.server_capabilities
        ):
            return await server_tasks.call_as_task(session, name, arguments, progress, mode.statuses)
        if session.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS:
            request = types.CallToolRequest(params=types.CallToolRequestParams(name=name, arguments=arguments))
            return (await session.send_request(request, _Raw, progress_callback=progress)).root
        result = await client.call_tool(name, arguments, progress_callback=progress)
        return result.model_dump(by_alias=True, mode="json", exclude_unset=True)
    except MCPError as exc:
        if _closed(exc):
            raise ServerLost("the server closed the connection before answering") from exc
        raise ProtocolFailure(exc.error.message, exc.error.code, exc.error.data) from exc
    except ValidationError as exc:
        raise ProtocolFailure(f"the MCP server's answer to tools/call is not a CallToolResult: {exc}") from exc
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, ConnectionError) as exc:
        raise ServerLost(f"the connection to the server broke: {type(exc).__name__}") from exc


def leaf(exc: BaseException) -> BaseException:
    """The first exception inside (nested) exception groups, which anyio task groups wrap errors in."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def outcome_unknown(server: str, tool: str, why: str) -> Json:
    """The task's result when a non-idempotent tool's call was lost by its server (the one outcome rule)."""
    return text_result(
        f"The MCP server {server!r} was lost while it ran {tool!r} ({why}); the outcome is unknown, so check the "
        "tool's side effects before calling it again",
        is_error=True,
    )


def unavailable(server: str, exc: BaseException) -> ProtocolFailure:
    """The failure of a call that never reached the server (it could not start, or refused the handshake)."""
    detail = exc.error.message if isinstance(exc, MCPError) else f"{type(exc).__name__}: {exc}"
    return ProtocolFailure(f"The MCP server {server!r} could not be started or reached: {detail}")
