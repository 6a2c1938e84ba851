"""Input for a synchronous `tools/call` that asks mid-run: multi-round-trip requests (SEP-2322).

A client without the tasks extension still gets every tool. When its synchronous run asks for input,
the executor keeps the run going as a hidden task parked in `input_required` (`ToolExecutor.run_inline`
raises `InputNeeded`), and the call answers an `InputRequiredResult`: the pending `inputRequests` and a
`requestState` bound to the principal, the tool, the arguments, that hidden task and the keys asked.
The client's retry (`inputResponses` + `requestState`, on any gateway replica) writes the answers to
the task through the store, as `tasks/update` does, and waits for the same run's next step: another
round or the final `CallToolResult`. One durable execution, not a restart.

SEP-2322 rules kept here: missing answers are asked again; answers to keys not pending are ignored; an
answer that does not fit its request is -32602; a state that is tampered with, foreign, expired or
names a run that has ended is -32602. Each round speaks for itself: the run may ask only what the
latest round's request declared, and a round lacking a capability its pending requests need is -32021.
While a round waits the run is watched by it (`watched_until`, `caller_watch_s`); between rounds it is
watched until the state expires; after either lapses its executor stops it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Final

from mcp_tasks.gateway import request_state
from mcp_tasks.gateway.context import ClientGone, RequestContext, unless_client_gone
from mcp_tasks.protocol import constants
from mcp_tasks.protocol.errors import InvalidParams, JsonObject, MissingRequiredClientCapability
from mcp_tasks.tasks import inline, transitions
from mcp_tasks.tasks.errors import InputCapabilityMissing, TaskNotFound
from mcp_tasks.tasks.interfaces import InputNeeded, Writer, transact
from mcp_tasks.tasks.record import TaskRecord
from mcp_tasks.tasks.results import error_result
from mcp_tasks.tasks.tools import ToolSpec

ENDED: Final = (
    "Invalid params: requestState names a call that has already ended (finished, cancelled or expired); "
    "call the tool again without requestState"
)


async def continue_run(ctx: RequestContext, tool: ToolSpec, arguments: JsonObject, run: str) -> JsonObject:
    """A retry carrying a verified `requestState` of run `run`: apply the answers, wait for the next step.

    Returns a `CallToolResult` or the next `InputRequiredResult`.

    Raises:
        InvalidParams: `inputResponses` is not an object, an answer does not fit its request (the message
            names the key), or the run has ended (-32602).
    """
    try:
        record = await ctx.services.store.get(run, ctx.owner)
    except TaskNotFound as exc:
        raise InvalidParams(ENDED) from exc
    if record.status.is_terminal:
        raise InvalidParams(ENDED)
    responses = ctx.params.get("inputResponses")
    if "inputResponses" in ctx.params and not isinstance(responses, dict):
        raise InvalidParams("Invalid params: inputResponses must be an object of key → response")
    now = ctx.services.clock
    watched = now() + timedelta(seconds=ctx.services.settings.caller_watch_s)
    capabilities = ctx.envelope.client_capabilities

    def this_round(record: TaskRecord) -> tuple[TaskRecord, None]:
        record = transitions.next_round(record, capabilities, watched)
        return (transitions.answer_input_requests(record, responses, now()) if responses else record), None

    try:
        await transact(ctx.services.store, run, this_round, Writer.CLIENT, owner=ctx.owner)
    except TaskNotFound as exc:
        raise InvalidParams(ENDED) from exc
    except InputCapabilityMissing as exc:
        raise MissingRequiredClientCapability(
            f"This round answers requests that need the {exc.capability!r} capability; declare it in this "
            "request's _meta, as the request that started the call did",
            {exc.capability.split(".")[0]: {}},
        ) from exc
    return await follow_run(ctx, tool, arguments, run)


async def follow_run(ctx: RequestContext, tool: ToolSpec, arguments: JsonObject, run: str) -> JsonObject:
    """Wait (up to the tool's `syncTimeoutSeconds`) for run `run` to finish or ask; answer accordingly.

    A run past the wait is cancelled and answered with an `isError` result. A client that leaves only
    stops following: the run is watched by whoever follows it (`watched_until`, renewed while waiting),
    so it goes on for another follower of the same round and is cancelled by its executor once nobody
    renews the watch.
    """
    timeout_s = tool.execution.sync_timeout_seconds
    services = ctx.services
    waiting = inline.await_call(
        services.store, run, timeout_s, services.clock, services.settings.caller_watch_s, ctx.progress
    )
    try:
        result = await unless_client_gone(ctx, waiting)
    except ClientGone:
        return ctx.complete(error_result(f"Tool {tool.name!r}: the client closed the connection"))
    except InputNeeded:
        return await ask_caller(ctx, tool, arguments, run)
    except TimeoutError:
        await inline.cancel_hidden(
            services.store, run, f"exceeded the synchronous wait of {timeout_s:g}s", services.clock
        )
        return ctx.complete(
            error_result(
                f"Tool {tool.name!r} did not finish within {timeout_s:g}s; "
                "call it with the tasks extension to run it as a task"
            )
        )
    except TaskNotFound:
        return ctx.complete(error_result(f"Tool {tool.name!r} was stopped: its run is gone"))
    return ctx.complete(dict(result))


async def ask_caller(ctx: RequestContext, tool: ToolSpec, arguments: JsonObject, run: str) -> JsonObject:
    """The `InputRequiredResult` of run `run`, parked on its pending `inputRequests`.

    The run stays watched until the `requestState` issued here expires, so a client that never comes back
    leaves nothing running past that.
    """
    settings = ctx.services.settings
    until = ctx.services.clock() + timedelta(seconds=settings.request_state_ttl_s)
    try:
        record, _ = await transact(
            ctx.services.store, run, lambda r: (transitions.await_next_round(r, until), None), Writer.CLIENT
        )
    except TaskNotFound:
        return ctx.complete(error_result(f"Tool {tool.name!r} was stopped: its run is gone"))
    outcome = inline.call_outcome(record)
    if outcome is not None:
        return ctx.complete(outcome)
    if not record.input_requests:  # answered meanwhile (a concurrent round): wait for what comes next
        return await follow_run(ctx, tool, arguments, run)
    state = request_state.issue(
        settings.request_state_secret,
        ctx.owner,
        tool.name,
        arguments,
        settings.request_state_ttl_s,
        run=run,
        keys=list(record.input_requests),
        clock=ctx.services.clock,
    )
    return ctx.complete(
        {
            "resultType": constants.RESULT_TYPE_INPUT_REQUIRED,
            "inputRequests": {key: dict(request) for key, request in record.input_requests.items()},
            "requestState": state,
        }
    )
