"""`tools/call`: validate, decide sync vs task, run pre-creation MRTR, create the task durably.

Order (protocol.md §4.3, §7.1; conformance.md §2): unknown tool → -32602; `Mcp-Param-*` headers →
-32020; the tool's required client capabilities → -32021; arguments against `inputSchema` → a
`CallToolResult` with `isError: true` (SEP-1303; no task is created); policy `required` without the
extension → -32021; a `requestState` of a run under way → its next input round (`input_rounds`);
`inputBeforeTask` → `InputRequiredResult` rounds; then either a task (`CreateTaskResult`, returned
only after the store committed it, and only within the caller's creation rate and unfinished-task quota:
`admission.admit_creation`, 429 otherwise, nothing stored) or a synchronous run, which answers
`InputRequiredResult` if the tool asks for input mid-run (SEP-2322). A legacy `params.task` is ignored.
A call without the extension of a tool that hands off skips the rounds and policy: its task is created
(within the same limits) and named in a `CallToolResult` (`handoff`).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from mcp_tasks.gateway import admission, handoff, input_rounds, request_state
from mcp_tasks.gateway.context import ClientGone, RequestContext, unless_client_gone
from mcp_tasks.observability import tracing
from mcp_tasks.protocol import constants, inputs, param_headers
from mcp_tasks.protocol.errors import InvalidParams, JsonObject, MissingRequiredClientCapability
from mcp_tasks.protocol.params import CallToolParams
from mcp_tasks.tasks import transitions
from mcp_tasks.tasks.errors import VersionConflict
from mcp_tasks.tasks.ids import mint_task_id
from mcp_tasks.tasks.interfaces import InlineCall, InputNeeded
from mcp_tasks.tasks.results import error_result
from mcp_tasks.tasks.tools import TaskPolicy, ToolSpec

logger = logging.getLogger("mcp_tasks.gateway")


def requested_tool(ctx: RequestContext, params: CallToolParams) -> ToolSpec:
    """The declared tool a `tools/call` names (either era).

    Raises:
        InvalidParams: no tool of that name is declared (-32602).
    """
    tool = ctx.services.catalog.get_tool(params.name)
    if tool is None:
        raise InvalidParams(f"Invalid params: unknown tool {params.name!r}; call tools/list for the available tools")
    return tool


async def call_tool(ctx: RequestContext, params: CallToolParams) -> JsonObject:
    """Handle `tools/call`; returns a `CallToolResult`, `InputRequiredResult` or `CreateTaskResult`.

    A follow tool (`task_status`, ...) is served by `handoff`; a call without the extension of a tool that
    hands off gets its task and a `CallToolResult` naming it (`handoff.start`), never `resultType: "task"`.
    """
    if handoff.serves(ctx, params.name):
        return ctx.complete(await handoff.follow(ctx, params))
    tool = requested_tool(ctx, params)
    arguments = params.arguments
    name = tool.name

    param_headers.check(ctx.headers, tool.header_bindings, arguments)
    missing = ctx.envelope.lacks_capabilities(tool.manifest.required_client_capabilities)
    if missing:
        raise MissingRequiredClientCapability(
            f"Tool {name!r} requires client capabilities {sorted(missing)}; declare them in this request's _meta",
            missing,
        )
    problems = tool.argument_errors(arguments)
    if problems:
        return ctx.complete(error_result(f"Invalid arguments for tool {name!r}: " + "; ".join(problems)))

    if handoff.hands_off(ctx, tool):  # before the rounds: its inputBeforeTask requests are asked in-task
        return ctx.complete(await handoff.start(ctx, tool, arguments))

    policy = tool.execution.task_policy
    as_task = ctx.envelope.declares_tasks and policy is not TaskPolicy.NEVER
    if policy is TaskPolicy.REQUIRED and not as_task:
        raise MissingRequiredClientCapability.tasks_extension(f"Tool {name!r}")

    claims = _verified_state(ctx, tool, arguments)
    if claims is not None and claims.run is not None:  # a round of a synchronous run under way
        return await input_rounds.continue_run(ctx, tool, arguments, claims.run)

    pre_input: JsonObject = {}
    if tool.manifest.input_before_task:
        round_result = _pre_creation_round(ctx, tool, arguments, claims is not None)
        if round_result is not None:
            return round_result
        answers = ctx.params.get("inputResponses") or {}
        pre_input = {key: answers[key] for key in tool.manifest.input_before_task}
        declined = [
            key
            for key in tool.manifest.input_before_task
            if isinstance(pre_input.get(key), dict) and pre_input[key].get("action") in {"decline", "cancel"}
        ]
        if declined:
            return ctx.complete(error_result(f"Not started: the request for {', '.join(declined)} was declined"))

    if as_task:
        return await _create_task(ctx, tool, arguments, pre_input)
    try:
        result = await run_inline(ctx, tool, arguments, pre_input, ctx.envelope.client_capabilities)
    except ClientGone:
        return ctx.complete(error_result(f"Tool {name!r} was stopped: the client closed the connection"))
    except InputNeeded as exc:
        if exc.task_id is None:
            raise MissingRequiredClientCapability.tasks_extension(f"Tool {name!r} asked for input mid-run; it") from exc
        return await input_rounds.ask_caller(ctx, tool, arguments, exc.task_id)
    except TimeoutError:
        return ctx.complete(
            error_result(
                f"Tool {name!r} did not finish within {tool.execution.sync_timeout_seconds:g}s; "
                "call it with the tasks extension to run it as a task"
            )
        )
    return ctx.complete(dict(result))


async def run_inline(
    ctx: RequestContext,
    tool: ToolSpec,
    arguments: JsonObject,
    pre_input: JsonObject,
    client_capabilities: JsonObject | None,
) -> JsonObject:
    """`executor.run_inline`, stopped (its tool process or hidden task cancelled) if the client leaves.

    `client_capabilities`: the request's, or `None` for a caller without input rounds (legacy era).

    Raises:
        ClientGone: the client closed the connection first; nobody will read the result.
        InputNeeded, TimeoutError: as `ToolExecutor.run_inline`.
    """
    offered = ctx.params.get("inputResponses") if client_capabilities is not None else None
    call = InlineCall(
        tool,
        arguments,
        ctx.owner,
        pre_input,
        client_capabilities,
        {k: v for k, v in offered.items() if k not in pre_input} if isinstance(offered, dict) else {},
        ctx.progress,
    )
    return await unless_client_gone(ctx, ctx.services.executor.run_inline(call))


def _verified_state(ctx: RequestContext, tool: ToolSpec, arguments: JsonObject) -> request_state.StateClaims | None:
    """The claims of the request's `requestState`, or `None` when it carries none.

    Raises:
        InvalidParams: `requestState` is not a string, or fails verification (-32602).
    """
    state = ctx.params.get("requestState")
    if state is None:
        return None
    if not isinstance(state, str):
        raise InvalidParams("Invalid params: requestState must be the string the server sent")
    secret = ctx.services.settings.request_state_secret
    return request_state.verify(secret, state, ctx.owner, tool.name, arguments, clock=ctx.services.clock)


def _pre_creation_round(
    ctx: RequestContext, tool: ToolSpec, arguments: JsonObject, has_state: bool
) -> JsonObject | None:
    """Return an `InputRequiredResult` while `inputBeforeTask` answers are missing, else `None`.

    Raises:
        InvalidParams: `inputResponses` is not an object, or an answer does not fit the request it answers
            (SEP-2322 `InputResponse`; the message names the key) (-32602).
        MissingRequiredClientCapability: the client declared none of the capabilities the requests need.
    """
    responses: Any = ctx.params.get("inputResponses")
    secret = ctx.services.settings.request_state_secret
    if "inputResponses" in ctx.params and not isinstance(responses, dict):
        raise InvalidParams("Invalid params: inputResponses must be an object of key → response")
    wanted = tool.manifest.input_before_task
    answered = (
        isinstance(responses, dict)
        and has_state
        and all(isinstance(responses.get(key), dict) and "action" in responses[key] for key in wanted)
    )
    if answered:
        for key, request in wanted.items():
            problem = inputs.response_problem({"method": request.method, "params": request.params}, responses[key])
            if problem is not None:
                raise InvalidParams(f"Invalid params: inputResponses[{key!r}] {problem}")
        return None
    requests: JsonObject = {}
    missing_caps: JsonObject = {}
    for key, request in wanted.items():
        capability = constants.INPUT_METHOD_CAPABILITY[request.method]
        if isinstance(ctx.envelope.client_capabilities.get(capability), dict):
            requests[key] = {"method": request.method, "params": request.params}
        else:
            missing_caps[capability] = {}
    if missing_caps:
        raise MissingRequiredClientCapability(
            f"Tool {tool.name!r} needs input before it starts; declare {sorted(missing_caps)} in this request's _meta",
            missing_caps,
        )
    return ctx.complete(
        {
            "resultType": constants.RESULT_TYPE_INPUT_REQUIRED,
            "inputRequests": requests,
            "requestState": request_state.issue(
                secret,
                ctx.owner,
                tool.name,
                arguments,
                ctx.services.settings.request_state_ttl_s,
                clock=ctx.services.clock,
            ),
        }
    )


async def _create_task(ctx: RequestContext, tool: ToolSpec, arguments: JsonObject, pre_input: JsonObject) -> JsonObject:
    """Insert the task and answer only after the store committed it (SEP-2663: durable before the handle).

    A task created from a pre-creation round takes its id from the (verified) `requestState`, so a
    replayed or retried final round hands back the same task instead of starting the work twice.

    Raises:
        LimitReached: `admission.admit_creation` refuses (429, nothing stored).
    """
    async with admission.admit_creation(ctx):
        return await _store_task(ctx, tool, arguments, pre_input)


async def _store_task(ctx: RequestContext, tool: ToolSpec, arguments: JsonObject, pre_input: JsonObject) -> JsonObject:
    """`_create_task` once admitted."""
    state = ctx.params.get("requestState")
    task_id = (
        request_state.task_id_for(ctx.services.settings.request_state_secret, state)
        if pre_input and isinstance(state, str)
        else mint_task_id()
    )
    record = transitions.new_task(
        task_id,
        ctx.owner,
        tool,
        arguments,
        ctx.services.clock(),
        pre_input_responses=pre_input,
        client_capabilities=ctx.envelope.client_capabilities,
    )
    client_trace = tracing.valid_traceparent(ctx.envelope.meta.get(tracing.META_TRACEPARENT))
    with tracing.span("mcp.task.create", client_trace, {"mcp.tool": tool.name}, server=True) as traceparent:
        try:
            stored = await ctx.services.store.create(dataclasses.replace(record, traceparent=traceparent))
        except VersionConflict:  # the same final round again: hand back the task it already created
            return ctx.complete((await ctx.services.store.get(task_id, ctx.owner)).to_created_result().to_wire())
    logger.info("task created", extra={"taskId": stored.task_id, "tool": tool.name, "tenant": ctx.owner.tenant_hash})
    return ctx.complete(stored.to_created_result().to_wire())
