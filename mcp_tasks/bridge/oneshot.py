"""A one-shot bridge: one call of one tool, on a server started for it (the executor's process per task).

The executor runs `python -m mcp_tasks.bridge` as the tool's process, so it is leased, adopted after a
crash of `mcptasks serve`, stopped at its deadline and settled by the outcome rule exactly like any tool
process. SIGTERM (a cancel, a deadline, a stop) abandons the call, which sends the server
`notifications/cancelled`, then stops the server and exits without a result; the executor settles the task.
"""

from __future__ import annotations

import logging
import signal

import anyio

from mcp_tasks.bridge.call import MAX_SENDS, Json, ServerLost, call_tool, leaf, outcome_unknown, unavailable
from mcp_tasks.bridge.mapping import Progress, connection_handlers
from mcp_tasks.bridge.server_tasks import TaskMode
from mcp_tasks.bridge.target import Target, connect
from mcp_tasks.runtime import ProtocolFailure, ToolContext

logger = logging.getLogger("mcp_tasks.bridge")

STOPPED_EXIT_CODE = 143
"""The bridge's exit code after SIGTERM (128 + 15, as a process killed by it)."""


def run_once(ctx: ToolContext, target: Target, tool: str, idempotent: bool, mode: TaskMode | None = None) -> Json:
    """Call `tool` on a fresh `target` server with `ctx.arguments`; return its `CallToolResult`.

    With a `mode`, the call runs as the server's own task (`server_tasks`); a SIGTERM then cancels that task
    on the server (`tasks/cancel`) before the connection closes.

    Raises:
        ProtocolFailure: the server answered with a JSON-RPC error, or never got the call.
        SystemExit: stopped by SIGTERM or SIGINT (code 143); no result is posted.
    """
    outcome: Json | None = anyio.run(_until_stopped, ctx, target, tool, idempotent, mode)
    if outcome is None:
        raise SystemExit(STOPPED_EXIT_CODE)
    return outcome


async def _until_stopped(
    ctx: ToolContext, target: Target, tool: str, idempotent: bool, mode: TaskMode | None
) -> Json | None:
    """`_send`, stopped at the first SIGTERM/SIGINT (then `None`).

    Only the call is abandoned (which sends the server `notifications/cancelled`); the connection then
    closes the ordinary way, so that notification is flushed before the server is stopped.

    Raises:
        ProtocolFailure: as `run_once`.
    """
    stopping = anyio.Event()
    failure: ProtocolFailure | None = None
    outcome: Json | None = None
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with anyio.create_task_group() as group:

            async def stop_on_signal() -> None:
                async for signum in signals:
                    logger.warning("stopped by signal %s: cancelling the call on the server", signum)
                    stopping.set()
                    return

            group.start_soon(stop_on_signal)
            try:
                outcome = await _send(ctx, target, tool, idempotent, stopping, mode)
            except ProtocolFailure as exc:  # raised after the group, which would wrap it in an exception group
                failure = exc
            group.cancel_scope.cancel()
    if failure is not None:
        raise failure
    return outcome


async def _send(
    ctx: ToolContext, target: Target, tool: str, idempotent: bool, stopping: anyio.Event, mode: TaskMode | None
) -> Json | None:
    """Send the call, again to a fresh server when an idempotent tool's server was lost (`MAX_SENDS` in all);
    `None` once `stopping` is set.

    Raises:
        ProtocolFailure: as `run_once`.
    """
    handlers = connection_handlers(lambda: ctx, target.server, mode.extensions if mode is not None else ())
    why = ""
    for send in range(1, MAX_SENDS + 1):
        sent = False
        result: Json | None = None
        failure: ProtocolFailure | None = None
        lost: str | None = None
        try:
            async with connect(target, handlers) as client:
                progress = Progress(ctx)
                async with anyio.create_task_group() as group:

                    async def stop_when_asked() -> None:
                        await stopping.wait()
                        group.cancel_scope.cancel()

                    group.start_soon(stop_when_asked)
                    group.start_soon(progress.run)
                    sent = True
                    # Kept, not raised, inside the block: the transport's task groups would wrap an error
                    # leaving it in an exception group.
                    try:
                        result = await call_tool(client, tool, ctx.arguments, progress, mode)
                    except ProtocolFailure as exc:
                        failure = exc
                    except ServerLost as exc:
                        lost = str(exc)
                    group.cancel_scope.cancel()
        except Exception as exc:  # the server could not be started, or its transport broke (maybe grouped)
            if not sent:
                raise unavailable(target.server, leaf(exc)) from exc
            if result is None and failure is None and lost is None:
                logger.warning("the connection to the MCP server failed mid-call: %r", leaf(exc))
                lost = f"{type(leaf(exc)).__name__}: {leaf(exc)}"
        if failure is not None:
            raise failure
        if result is not None:
            return result
        why = lost or why
        if stopping.is_set():
            return None
        if not idempotent:
            return outcome_unknown(target.server, tool, why)
        if send < MAX_SENDS:
            message = f"The MCP server was lost ({why}); calling {tool!r} again on a fresh server (idempotent)"
            await anyio.to_thread.run_sync(ctx.report, message, abandon_on_cancel=True)
    return outcome_unknown(target.server, tool, f"lost {MAX_SENDS} times; last: {why}")
