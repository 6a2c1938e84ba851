"""Settings of the gateway (group `gateway` of `Settings`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from mcp_tasks.tasks.tools import TOOL_NAME_PATTERN


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    """How the MCP endpoint behaves.

    Attributes:
        server_name: `serverInfo.name` stamped on every result's `_meta`.
        server_version: `serverInfo.version`.
        max_body_bytes: largest POST body accepted, in bytes (default 1 MiB); larger → 413 with -32600.
            Counted after `Content-Encoding` is undone, so a compressed body cannot expand past it.
        body_read_timeout_s: longest time to receive a whole POST body, in seconds (default 30: a 1 MiB
            body over a slow link); a body still incomplete then gets 408 and the connection is closed.
        idle_timeout_s: a connection that has not sent a whole request head within this many seconds of
            opening, or idles this long between requests, is closed, in seconds (default 30; aiohttp's
            keep-alive timeout). Streams being answered (`subscriptions/listen`) are not affected.
        allowed_origins: extra `Origin` values accepted besides loopback origins (which are accepted when
            `loopback_only`); any other `Origin` gets 403 (DNS-rebinding protection).
        loopback_only: the server is bound to loopback: also reject a `Host` that is not loopback.
        list_page_size: tools per `tools/list` page.
        list_ttl_ms: `ttlMs` cache hint on `server/discover` and `tools/list`, in ms (default 60 s).
        request_state_secret: HMAC key for pre-creation MRTR `requestState` (32+ random bytes).
        request_state_ttl_s: how long an issued `requestState` stays valid, in seconds (default 10 min).
        listen_max_task_ids: most task ids one `subscriptions/listen` may watch.
        listen_keepalive_s: SSE comment keepalive interval on listen streams, in seconds.
        legacy_call_timeout_s: longest a legacy-era (2025-11-25) `tools/call` stays open, in seconds
            (default 600). Such a client cannot poll a task, so its call is a stream; after this long the
            hidden task is cancelled and the call ends with an `isError` result that says to connect
            with the tasks extension.
        caller_watch_s: how long a hidden task (a synchronous call on Kubernetes, any legacy-era call) is
            watched ahead by the gateway waiting for it, in seconds (default 30; renewed every half of
            it). If that gateway dies, the executor cancels the task once the watch lapses.
        accept_missing_name_header: accept `tasks/get`, `tasks/update` and `tasks/cancel` without the
            `Mcp-Name` header (default false: -32020 naming the header to add, as SEP-2243 asks). For
            clients that omit it (fastmcp-tasks 4.1); a header that differs from the body is always refused.
        handoff_default: hand off the calls without the tasks extension of every task-capable tool whose
            manifest leaves `execution.handoff` unset (default false: such calls run synchronously, as
            before). A handed-off call answers at once with a result naming its task, followed with the
            `task_status`, `task_respond` and `task_cancel` tools (docs/handoff.md).
        handoff_status_tool: the name of the follow tool that shows a handed-off task (default `task_status`).
            Rename the three when a host also connects another server with tools of these names.
        handoff_respond_tool: the name of the follow tool that answers its input requests (default
            `task_respond`).
        handoff_cancel_tool: the name of the follow tool that cancels it (default `task_cancel`).
    """

    server_name: str = "mcp-tasks"
    server_version: str = "0.1.0"
    max_body_bytes: int = 1024 * 1024
    body_read_timeout_s: float = 30.0
    idle_timeout_s: float = 30.0
    allowed_origins: frozenset[str] = frozenset()
    loopback_only: bool = True
    list_page_size: int = 100
    list_ttl_ms: int = 60_000
    request_state_secret: bytes = field(default=b"", repr=False)
    request_state_ttl_s: int = 600
    listen_max_task_ids: int = 100
    listen_keepalive_s: float = 15.0
    legacy_call_timeout_s: float = 600.0
    caller_watch_s: float = 30.0
    accept_missing_name_header: bool = False
    handoff_default: bool = False
    handoff_status_tool: str = "task_status"
    handoff_respond_tool: str = "task_respond"
    handoff_cancel_tool: str = "task_cancel"

    def follow_tool_names(self) -> tuple[str, str, str]:
        """The follow tools' names: status, respond, cancel."""
        return (self.handoff_status_tool, self.handoff_respond_tool, self.handoff_cancel_tool)

    def check(self) -> None:
        """Check the fields that have rules of their own.

        Raises:
            ValueError: a follow tool name that is not an MCP tool name, or two follow tools of one name.
        """
        names = self.follow_tool_names()
        variables = ("MCPTASKS_HANDOFF_STATUS_TOOL", "MCPTASKS_HANDOFF_RESPOND_TOOL", "MCPTASKS_HANDOFF_CANCEL_TOOL")
        for variable, name in zip(variables, names, strict=True):
            if not re.fullmatch(TOOL_NAME_PATTERN, name):
                raise ValueError(f"{variable} must be a tool name matching {TOOL_NAME_PATTERN}, got {name!r}")
        if len(set(names)) != len(names):
            raise ValueError(f"{', '.join(variables)} must be three different names, got {', '.join(names)}")
