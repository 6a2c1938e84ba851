"""Discovery: the server's handshake and its whole `tools/list`, printed as JSON for the executor.

`python -m mcp_tasks.bridge discover` starts the server the way a call does (`target.connect`), in its era,
declaring every client capability the bridge can serve, lists every page of `tools/list` (lists again,
at most `MAX_LISTINGS` times, while `notifications/tools/list_changed` arrives during a listing: some
servers register tools only once they know the client's capabilities), and prints one JSON object:
`{protocolVersion, serverInfo, capabilities, instructions?, tools: [Tool, ...]}`, the tools as sent.
A server request during discovery (a `roots/list` at start, say) is answered with an error: no task
and no client exist yet.
"""

from __future__ import annotations

from typing import Any, Final

import mcp_types as types
from mcp.client.session import ClientRequestContext
from pydantic import RootModel

from mcp_tasks.bridge.mapping import ServerMessages
from mcp_tasks.bridge.target import Handlers, Target, connect

MAX_PAGES: Final = 100
"""Most `tools/list` pages read; a server that keeps sending cursors past it is listed that far."""
MAX_LISTINGS: Final = 3
"""Most complete listings while the server keeps announcing `tools/list_changed`."""
_Raw = RootModel[dict[str, Any]]
"""A result kept as the server sent it (after the SDK's own checks of its era)."""
_NOT_DURING_DISCOVERY: Final = types.ErrorData(
    code=types.INVALID_REQUEST, message="mcp-tasks is discovering this server's tools: there is no call to ask for"
)


async def _refuse_sampling(context: ClientRequestContext, params: types.CreateMessageRequestParams) -> types.ErrorData:
    return _NOT_DURING_DISCOVERY


async def _refuse_elicitation(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ErrorData:
    return _NOT_DURING_DISCOVERY


async def _refuse_roots(context: ClientRequestContext) -> types.ErrorData:
    return _NOT_DURING_DISCOVERY


async def discover(target: Target) -> dict[str, Any]:
    """Handshake, list every tool, and return what discovery prints (see the module docstring).

    Raises:
        OSError, ConnectionError, mcp.shared.exceptions.MCPError: the server could not be started,
            reached, or listed.
    """
    changes = 0

    def changed() -> None:
        nonlocal changes
        changes += 1

    messages = ServerMessages(target.server, on_tools_changed=changed)
    handlers = Handlers(_refuse_sampling, _refuse_elicitation, _refuse_roots, messages.logging, messages.message)
    async with connect(target, handlers) as client:
        tools: list[Any] = []
        for _ in range(MAX_LISTINGS):
            seen = changes
            tools = []
            cursor: str | None = None
            for _page in range(MAX_PAGES):
                request = types.ListToolsRequest(params=types.PaginatedRequestParams(cursor=cursor))
                page = (await client.session.send_request(request, _Raw)).root
                tools.extend(tool for tool in page.get("tools") or [] if isinstance(tool, dict))
                cursor = page.get("nextCursor")
                if not isinstance(cursor, str) or not cursor:
                    break
            if changes == seen:
                break
        session = client.session
        info = session.server_info
        capabilities = session.server_capabilities
        found: dict[str, Any] = {
            "protocolVersion": session.protocol_version,
            "serverInfo": info.model_dump(by_alias=True, mode="json", exclude_none=True) if info else {},
            "capabilities": capabilities.model_dump(by_alias=True, mode="json", exclude_none=True)
            if capabilities
            else {},
            "tools": tools,
        }
        if session.instructions:
            found["instructions"] = session.instructions
        return found
