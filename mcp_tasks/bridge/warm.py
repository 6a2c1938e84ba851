"""A warm bridge: one long-lived server connection taking concurrent calls (McpServer `spec.warm`).

The runtime's warm serve loop (`runtime.serve`, docs/tool-runtime.md §7) runs `WarmBridge.main` once per
call, each in its own thread, up to `warm.concurrency` at once. Every call goes over the same connection
to one server process, with its own JSON-RPC request id and progress token (the SDK assigns both), from an
event loop in a background (daemon) thread. A server request (elicitation, sampling,
roots) is put to the one call in flight; with several in flight it is refused, since neither stdio nor
the SDK relates a server request to the client request it serves. A lost connection is opened again for
the next call; the calls it carried follow the outcome rule (`bridge.call`).
"""

from __future__ import annotations

import logging
import threading

import anyio
import anyio.from_thread
from anyio.abc import TaskGroup, TaskStatus
from anyio.lowlevel import EventLoopToken
from mcp import Client

from mcp_tasks.bridge.call import MAX_SENDS, Json, ServerLost, call_tool, leaf, outcome_unknown, unavailable
from mcp_tasks.bridge.mapping import NO_CALL, Progress, connection_handlers
from mcp_tasks.bridge.server_tasks import TaskMode
from mcp_tasks.bridge.target import Target, connect
from mcp_tasks.runtime import ProtocolFailure, ToolContext
from mcp_tasks.runtime.tool import CallCancelled

logger = logging.getLogger("mcp_tasks.bridge")

LOOP_START_TIMEOUT_S = 30.0
"""Longest wait for the bridge's event loop thread to start, in seconds."""
CANCEL_POLL_S = 0.1
"""How often a warm call checks whether it was cancelled (the runtime offers a flag, not an event), in seconds."""


class _Connection:
    """One open client, held by its own task in the bridge loop (anyio scopes close in the task that opened them)."""

    def __init__(self, client: Client, closing: anyio.Event) -> None:
        self.client = client
        self.closing = closing


class WarmBridge:
    """The warm worker's `main`: calls of `tool` over one connection to `target`, opened on first use.

    With a `mode`, each call runs as the server's own task (`server_tasks`), followed by the call's own
    thread; the connection's `notifications/tasks/status` reach each by the server's task id.
    """

    def __init__(self, target: Target, tool: str, idempotent: bool, mode: TaskMode | None = None) -> None:
        self._target = target
        self._mode = mode
        self._tool = tool
        self._idempotent = idempotent
        self._calls: dict[int, ToolContext] = {}
        self._calls_lock = threading.Lock()
        self._ready = threading.Event()
        self._token: EventLoopToken | None = None
        self._group: TaskGroup | None = None
        # A daemon thread, not a blocking portal: a portal's thread is joined at interpreter exit, which would
        # keep a draining warm worker from exiting until it is killed.
        threading.Thread(target=anyio.run, args=(self._run_loop,), name="bridge-loop", daemon=True).start()
        if not self._ready.wait(LOOP_START_TIMEOUT_S):
            raise RuntimeError("the bridge's event loop did not start")
        self._connection: _Connection | None = None
        self._connecting: anyio.Lock | None = None
        self._handlers = connection_handlers(self._resolve, target.server, mode.extensions if mode is not None else ())

    async def _run_loop(self) -> None:
        """The event loop's root: owns the connection holders' task group, for the process's life."""
        self._token = anyio.lowlevel.current_token()
        async with anyio.create_task_group() as group:
            self._group = group
            self._ready.set()
            await anyio.sleep_forever()

    def _resolve(self) -> ToolContext | str:
        with self._calls_lock:
            if len(self._calls) == 1:
                return next(iter(self._calls.values()))
            if not self._calls:
                return NO_CALL
            return f"{len(self._calls)} calls share this warm server connection and the request names none of them"

    def main(self, ctx: ToolContext) -> Json:
        """One call (the runtime's warm loop calls this in the call's thread); returns its `CallToolResult`.

        Raises:
            ProtocolFailure: as `oneshot.run_once`.
            CallCancelled: the call was cancelled or passed its deadline (the server got
                `notifications/cancelled`).
        """
        key = id(ctx)
        with self._calls_lock:
            self._calls[key] = ctx
        try:
            outcome: Json | None = anyio.from_thread.run(self._call, ctx, token=self._token)
        finally:
            with self._calls_lock:
                self._calls.pop(key, None)
        if outcome is None:
            raise CallCancelled("the call was cancelled")
        return outcome

    async def _hold(self, task_status: TaskStatus[_Connection]) -> None:
        """Open the connection, hand it out, keep it until it is closed (`closing`)."""
        closing = anyio.Event()
        async with connect(self._target, self._handlers) as client:
            task_status.started(_Connection(client, closing))
            await closing.wait()

    async def _connected(self) -> _Connection:
        if self._connecting is None:
            self._connecting = anyio.Lock()
        async with self._connecting:
            if self._connection is None:
                assert self._group is not None  # set before `_ready`
                self._connection = await self._group.start(self._hold)
            return self._connection

    async def _drop(self, connection: _Connection) -> None:
        if self._connection is connection:
            self._connection = None
        connection.closing.set()

    async def _call(self, ctx: ToolContext) -> Json | None:
        why = ""
        for _send in range(MAX_SENDS):
            try:
                connection = await self._connected()
            except Exception as exc:
                raise unavailable(self._target.server, leaf(exc)) from exc
            progress = Progress(ctx)
            cancelled = False
            async with anyio.create_task_group() as group:

                async def watch_cancel() -> None:
                    nonlocal cancelled
                    while not ctx.cancelled:  # noqa: ASYNC110 - the runtime offers a flag, not an event to await
                        await anyio.sleep(CANCEL_POLL_S)
                    cancelled = True
                    group.cancel_scope.cancel()

                group.start_soon(watch_cancel)
                group.start_soon(progress.run)
                try:
                    result = await call_tool(connection.client, self._tool, ctx.arguments, progress, self._mode)
                except ProtocolFailure:
                    group.cancel_scope.cancel()
                    raise
                except ServerLost as exc:
                    why = str(exc)
                    result = None
                except Exception as exc:  # the transport broke mid-call
                    logger.exception("the connection to the MCP server failed mid-call")
                    why = type(exc).__name__
                    result = None
                group.cancel_scope.cancel()
            if cancelled:
                return None
            if result is not None:
                return result
            await self._drop(connection)
            if not self._idempotent:
                return outcome_unknown(self._target.server, self._tool, why)
        return outcome_unknown(self._target.server, self._tool, f"lost {MAX_SENDS} times; last: {why}")
