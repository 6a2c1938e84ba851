"""Handoff: long tools for hosts without the tasks extension (issue 34, docs/handoff.md).

A `tools/call` that did not declare `io.modelcontextprotocol/tasks` (2026-07-28 without the extension, or
any legacy 2025-11-25 call) of a tool that hands off (`ToolSpec.hands_off`: `execution.handoff`, else the
server's `handoff_default`) is answered by `start`: the task is created durably, owned by the caller,
exactly as a task-augmented call creates it, and the call answers at once with an ordinary
`CallToolResult` naming it (text for the model, `structuredContent {taskId, status, pollIntervalMs}`, the id
in `_meta["io.mcptasks/taskId"]`). Never `resultType: "task"`: the request did not declare the extension.

The caller follows the task with three tools this module lists and serves (`follow`), named by the
settings (`GatewaySettings.handoff_status_tool`, `handoff_respond_tool`, `handoff_cancel_tool`; defaults below):

- `task_status {taskId, waitSeconds?}`: waits up to `waitSeconds` (bounded by the task's tool's
  `syncTimeoutSeconds`) on the store's change feed for the status or the pending input requests to change,
  then answers the status, the latest progress message, the pending input requests (text and
  `structuredContent`), or, once completed, the task's own `CallToolResult` verbatim;
- `task_respond {taskId, inputResponses}`: `tasks/update` (`task_methods.update_task`);
- `task_cancel {taskId}`: `tasks/cancel` (`task_methods.cancel_task`).

They are listed only to a caller that can see at least one handoff tool, and a catalog tool of the same
name wins. A handed-off task may ask a form question (the model asks its user in the conversation and
answers with `task_respond`); URL elicitation, sampling and roots only where the request itself declared them
(`answerable`), so no task holds an input request of a kind its caller did not declare. Every lookup goes
through the store with the caller as owner, so another principal's task id,
an expired one and an unknown one all raise `TaskNotFound`, answered with the one tool error
(`UNKNOWN_TASK_TEXT`, same path). Called by `tool_calls`, `legacy` and `discovery`; never creates a hidden task.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from jsonschema import Draft202012Validator
from mcp_types import Tool, ToolAnnotations

from mcp_tasks.gateway import admission, task_methods
from mcp_tasks.gateway.context import RequestContext
from mcp_tasks.gateway.identity import scopes
from mcp_tasks.gateway.listen import SHUTDOWN_KEY, wait_for_change_or_shutdown
from mcp_tasks.gateway.settings import GatewaySettings
from mcp_tasks.observability import tracing
from mcp_tasks.protocol import constants
from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.protocol.models import TaskRequestParams, TaskStatus, UpdateTaskRequestParams
from mcp_tasks.protocol.params import CallToolParams
from mcp_tasks.tasks import transitions
from mcp_tasks.tasks.errors import InvalidInputResponse, TaskNotFound
from mcp_tasks.tasks.ids import mint_task_id
from mcp_tasks.tasks.record import TaskRecord
from mcp_tasks.tasks.results import error_result
from mcp_tasks.tasks.tools import NO_RETRIEVAL, ExecutionSpec, ToolSpec

logger = logging.getLogger("mcp_tasks.gateway")

STATUS_TOOL: Final = "task_status"
RESPOND_TOOL: Final = "task_respond"
CANCEL_TOOL: Final = "task_cancel"
"""The follow tools' default names (`GatewaySettings.handoff_*_tool`)."""

WAIT_SLICE_S: Final = 1.0
"""Longest single wait on the change feed inside `task_status`, in seconds: between slices the caller's
connection is checked, so a host that gave up does not hold a wait open."""

_TASK_ID_SCHEMA: Final[JsonObject] = {
    "type": "string",
    "minLength": 1,
    "maxLength": 256,
    "description": "The taskId a handed-off tool call answered with.",
}


@dataclass(frozen=True, slots=True)
class FollowTools:
    """The three follow tools under the names this server gives them, as `tools/list` lists them.

    `status`, `respond`, `cancel`: the tool names; `tools`: the three `Tool`s in that order;
    `validators`: name → 2020-12 validator of its `inputSchema`; `instructions`: the sentence added to the
    server's `instructions` (`server/discover`, legacy `initialize`) where the follow tools are listed.
    """

    status: str
    respond: str
    cancel: str
    tools: tuple[Tool, ...]
    validators: Mapping[str, Draft202012Validator]
    instructions: str


@functools.cache
def follow_tools(status: str = STATUS_TOOL, respond: str = RESPOND_TOOL, cancel: str = CANCEL_TOOL) -> FollowTools:
    """The follow tools named `status`, `respond` and `cancel` (built once per set of names)."""
    tools = (
        Tool(
            name=status,
            title="Task status",
            description=(
                "Follow a task that a long tool started in the background. Answers its status and progress, the "
                f"questions it waits for (answer them with {respond}), or, once it is done, the tool's own "
                "result. waitSeconds waits for a change first (0, the default: answer at once)."
            ),
            input_schema={
                "type": "object",
                "properties": {
                    "taskId": _TASK_ID_SCHEMA,
                    "waitSeconds": {
                        "type": "number",
                        "minimum": 0,
                        "description": "Wait up to this many seconds for the task to change before answering.",
                    },
                },
                "required": ["taskId"],
                "additionalProperties": False,
            },
            annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False),
        ),
        Tool(
            name=respond,
            title="Answer a task's questions",
            description=(
                f"Answer the input requests {status} showed for a task: inputResponses maps each request's key "
                'to its answer (for a question: {"action": "accept", "content": {...}} or {"action": "decline"}).'
            ),
            input_schema={
                "type": "object",
                "properties": {
                    "taskId": _TASK_ID_SCHEMA,
                    "inputResponses": {
                        "type": "object",
                        "additionalProperties": {"type": "object"},
                        "description": "Answers by input request key.",
                    },
                },
                "required": ["taskId", "inputResponses"],
                "additionalProperties": False,
            },
            annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False),
        ),
        Tool(
            name=cancel,
            title="Cancel a task",
            description=f"Ask a task started in the background to stop. Cooperative: {status} shows when it ended.",
            input_schema={
                "type": "object",
                "properties": {"taskId": _TASK_ID_SCHEMA},
                "required": ["taskId"],
                "additionalProperties": False,
            },
            annotations=ToolAnnotations(
                read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
            ),
        ),
    )
    return FollowTools(
        status=status,
        respond=respond,
        cancel=cancel,
        tools=tools,
        validators={tool.name: Draft202012Validator(tool.input_schema, registry=NO_RETRIEVAL) for tool in tools},
        instructions=(
            f" Without the extension, some long tools answer at once with a taskId instead of their result: follow "
            f"it with {status}, answer its questions with {respond}, stop it with {cancel}."
        ),
    )


def named(settings: GatewaySettings) -> FollowTools:
    """The follow tools under `settings`' names (`GatewaySettings.follow_tool_names`)."""
    return follow_tools(*settings.follow_tool_names())


STARTED_SCHEMA: Final[JsonObject] = {
    "type": "object",
    "properties": {
        "taskId": {"type": "string"},
        "status": {"type": "string"},
        "pollIntervalMs": {"type": "integer"},
    },
    "required": ["taskId", "status", "pollIntervalMs"],
}
"""The `structuredContent` of a handoff answer (`start`)."""
_ROOT_KEYWORDS: Final = ("$schema", "$id", "$defs", "definitions")
"""Keywords that stay at the root when a schema is nested (its `$ref`s point from there)."""


def as_listed(spec: ToolSpec, default: bool) -> Tool:
    """`spec`'s tool as `tools/list` shows it (`default`: the server's `handoff_default`).

    A tool that hands off and declares an `outputSchema` lists one that also admits the handoff answer's
    `structuredContent` (`anyOf` its own and `STARTED_SCHEMA`, root keywords kept at the root): clients
    check a result's `structuredContent` against the listed schema (MCP `server/tools` Output Schema; the
    TypeScript SDK 1.x refuses a result that does not match, or has none). The same for every caller, so
    the listing stays shareable; a task's own result still matches the tool's schema, which the server
    checks (`ToolSpec.result_errors`).
    """
    schema = spec.tool.output_schema
    if schema is None or not spec.hands_off(default):
        return spec.tool
    root = {key: value for key, value in schema.items() if key in _ROOT_KEYWORDS}
    own = {key: value for key, value in schema.items() if key not in _ROOT_KEYWORDS}
    widened = {**root, "type": "object", "anyOf": [own, STARTED_SCHEMA]}
    return spec.tool.model_copy(update={"output_schema": widened})


def hands_off(ctx: RequestContext, tool: ToolSpec) -> bool:
    """Whether this call of `tool` is handed off: only without the tasks extension, of a tool that hands off."""
    return not ctx.envelope.declares_tasks and tool.hands_off(ctx.services.settings.handoff_default)


def _offered(ctx: RequestContext) -> bool:
    """Whether the caller can see at least one tool that hands off (its scopes allowing)."""
    default = ctx.services.settings.handoff_default
    return any(tool.hands_off(default) for tool in scopes.visible(ctx.services.catalog.list_tools(), ctx.identity))


def listed(ctx: RequestContext) -> list[Tool]:
    """The follow tools `tools/list` adds after the catalog's: none unless `_offered`; a name the catalog
    already has is left out (the catalog's tool wins).
    """
    if not _offered(ctx):
        return []
    catalog = ctx.services.catalog
    return [tool for tool in named(ctx.services.settings).tools if catalog.get_tool(tool.name) is None]


def instructions(ctx: RequestContext) -> str:
    """The sentence about the follow tools for the server's `instructions`, or "" where none is listed."""
    return named(ctx.services.settings).instructions if listed(ctx) else ""


def serves(ctx: RequestContext, name: str) -> bool:
    """Whether `name` is a follow tool this caller may call (listed to it, not shadowed by a catalog tool)."""
    follow = named(ctx.services.settings)
    return name in follow.validators and ctx.services.catalog.get_tool(name) is None and _offered(ctx)


def _started_text(record: TaskRecord, limit_s: float, follow: FollowTools) -> str:
    return (
        f"Started task {record.task_id} (tool {record.tool}); it runs in the background. Call `{follow.status}` "
        f'with {{"taskId": "{record.task_id}"}} to follow it (add "waitSeconds", up to {limit_s:g}, to wait for a '
        f"change); once it is done, `{follow.status}` answers the tool's own result. If it asks a question, answer "
        f"with `{follow.respond}`; `{follow.cancel}` stops it."
    )


def _wait_limit_s(ctx: RequestContext, tool_name: str) -> float:
    """The longest `waitSeconds` honoured for a task of `tool_name`: its `syncTimeoutSeconds`, in seconds."""
    tool = ctx.services.catalog.get_tool(tool_name)
    execution = tool.execution if tool is not None else ExecutionSpec()
    return execution.sync_timeout_seconds


def answerable(declared: JsonObject) -> JsonObject:
    """The input capabilities a handed-off task records: a form question (`elicitation.form`) whatever its
    caller declared, since the model asks its user in the conversation and answers with `task_respond`; plus
    the input kinds the creating
    request declared itself (`declared`, its `clientCapabilities`; `{}` in the legacy era, where a stateless
    server cannot know what `initialize` said). A URL to open, a sampling request or the roots reach the
    model only where its host declared them (MCP 2026-07-28: no input request of an undeclared kind).
    """
    kinds = transitions.input_capabilities(declared)
    elicitation = kinds.get("elicitation")
    modes = dict(elicitation) if isinstance(elicitation, dict) else {}
    modes.setdefault("form", {})
    return {**kinds, "elicitation": modes}


async def start(ctx: RequestContext, tool: ToolSpec, arguments: JsonObject) -> JsonObject:
    """Create the caller's task for `tool` and answer the call with a `CallToolResult` naming it.

    The task is committed before the answer (SEP-2663: durable before the handle), like a task-augmented
    call's; its client capabilities are `answerable`'s (a form question always, other kinds only where this
    request declared them), so the tool is refused any other kind before it is put (412 to the tool). The
    tool's `inputBeforeTask` requests are asked in-task (the caller has no pre-creation round here). Returns
    the result without `resultType` (the era frames it).

    Raises:
        StoreUnavailable: the task could not be stored (-32603 family, by the one mapper).
        LimitReached: over the caller's creation rate or unfinished-task quota (429, nothing stored).
    """
    record = transitions.new_task(
        mint_task_id(),
        ctx.owner,
        tool,
        arguments,
        ctx.services.clock(),
        client_capabilities=answerable(ctx.envelope.client_capabilities),
    )
    meta = ctx.params.get("_meta")
    client_trace = tracing.valid_traceparent(meta.get(tracing.META_TRACEPARENT) if isinstance(meta, dict) else None)
    async with admission.admit_creation(ctx):  # the caller's rates and quota, as for any task (429)
        with tracing.span("mcp.task.create", client_trace, {"mcp.tool": tool.name}, server=True) as traceparent:
            stored = await ctx.services.store.create(dataclasses.replace(record, traceparent=traceparent))
    logger.info(
        "task created (handed off)",
        extra={"taskId": stored.task_id, "tool": tool.name, "tenant": ctx.owner.tenant_hash},
    )
    return {
        "content": [
            {
                "type": "text",
                "text": _started_text(stored, tool.execution.sync_timeout_seconds, named(ctx.services.settings)),
            }
        ],
        "structuredContent": {
            "taskId": stored.task_id,
            "status": stored.status.value,
            "pollIntervalMs": stored.poll_interval_ms,
        },
        "isError": False,
        "_meta": {constants.META_HANDOFF_TASK_ID: stored.task_id},
    }


UNKNOWN_TASK_TEXT: Final = (
    "No task of yours has this taskId: it may have expired, or the id is mistyped. "
    "Use the taskId a tool call answered with."
)
"""The one answer for a task id that is not the caller's, has expired, or never existed (it does not repeat
the id, so the answers are byte for byte the same)."""


async def follow(ctx: RequestContext, params: CallToolParams) -> JsonObject:
    """Serve a `tools/call` of a follow tool (`serves` said yes); returns a `CallToolResult` without
    `resultType`. Arguments that fail the tool's `inputSchema` get an `isError` result (SEP-1303).

    Raises:
        StoreUnavailable: as any store read (by the one mapper).
    """
    arguments = params.arguments
    follow = named(ctx.services.settings)
    problems = [
        f"{'/'.join(str(p) for p in error.absolute_path) or '(root)'}: {error.message[:200]}"
        for error in follow.validators[params.name].iter_errors(arguments)
    ]
    if problems:
        return error_result(f"Invalid arguments for tool {params.name!r}: " + "; ".join(problems[:10]))
    task_id = str(arguments["taskId"])
    try:
        if params.name == follow.status:
            return await _status(ctx, task_id, float(arguments.get("waitSeconds", 0)), follow)
        if params.name == follow.respond:
            return await _respond(ctx, task_id, dict(arguments["inputResponses"]), follow)
        return await _cancel(ctx, task_id, follow)
    except TaskNotFound:
        return error_result(UNKNOWN_TASK_TEXT)


def _view(record: TaskRecord) -> tuple[object, ...]:
    """What ends a `task_status` wait when it changes: the status and the pending input keys. Not progress
    messages (a chatty tool would end every wait at once, costing the model a turn each) nor lease renewals;
    the answer shows the latest message anyway.
    """
    return (record.status, tuple(sorted(record.input_requests)))


async def _status(ctx: RequestContext, task_id: str, wait_s: float, follow: FollowTools) -> JsonObject:
    """`task_status`: the task now, or after its first visible change within `wait_s` (bounded).

    Raises:
        TaskNotFound: not the caller's task, expired, or unknown (also if it expires during the wait).
    """
    store = ctx.services.store
    record = await store.get(task_id, ctx.owner)
    limit_s = _wait_limit_s(ctx, record.tool)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + min(max(wait_s, 0.0), limit_s)
    shown = _view(record)
    shutdown = ctx.request.app[SHUTDOWN_KEY]
    while record.status is TaskStatus.WORKING and _view(record) == shown:
        remaining = deadline - loop.time()
        if remaining <= 0 or ctx.client_gone():
            break
        if await wait_for_change_or_shutdown(store, shutdown, min(remaining, WAIT_SLICE_S), task_id):
            break
        record = await store.get(task_id, ctx.owner)
    return _status_result(record, limit_s, follow)


def _status_result(record: TaskRecord, limit_s: float, follow: FollowTools) -> JsonObject:
    """The `CallToolResult` `task_status` answers for `record` (see the module docstring)."""
    task_id = record.task_id
    status = record.status
    structured: JsonObject = {"taskId": task_id, "status": status.value, "pollIntervalMs": record.poll_interval_ms}
    if record.status_message:
        structured["statusMessage"] = record.status_message
    meta = {constants.META_HANDOFF_TASK_ID: task_id}
    about = f"Task {task_id} (tool {record.tool})"
    if status is TaskStatus.COMPLETED:
        wire = record.to_wire_task().result or error_result(f"{about} completed without a result")
        own_meta = wire.get("_meta")
        return {**wire, "_meta": {**own_meta, **meta} if isinstance(own_meta, dict) else meta}
    if status is TaskStatus.FAILED:
        error = record.error or {}
        structured["error"] = error
        text = f"{about} failed: {error.get('message', 'no reason given')}"
        return {**error_result(text), "structuredContent": structured, "_meta": meta}
    if status is TaskStatus.CANCELLED:
        text = f"{about} was cancelled" + (f": {record.status_message}" if record.status_message else ".")
        return {**error_result(text), "structuredContent": structured, "_meta": meta}
    if status is TaskStatus.INPUT_REQUIRED:
        structured["inputRequests"] = dict(record.input_requests)
        lines = [
            f"{about} is waiting for input. Answer with `{follow.respond}` "
            f'{{"taskId": "{task_id}", "inputResponses": {{<key>: <answer>, ...}}}}, one answer per key:'
        ]
        lines += [
            f"- key {json.dumps(key)}: {describe_request(request)}" for key, request in record.input_requests.items()
        ]
        text = "\n".join(lines)
    else:
        progress = f": {record.status_message}" if record.status_message else ""
        text = (
            f'{about} is still working{progress}. Call `{follow.status}` again to follow it ("waitSeconds", up '
            f"to {limit_s:g}, waits for a change); `{follow.cancel}` stops it."
        )
    return {
        "content": [{"type": "text", "text": text}],
        "structuredContent": structured,
        "isError": False,
        "_meta": meta,
    }


def _compact(value: Any, limit: int = 2000) -> str:
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe_request(request: JsonObject) -> str:
    """One input request (`{method, params}`) as the model reads it, with the shape of its answer."""
    method = request.get("method")
    params = request.get("params")
    params = params if isinstance(params, dict) else {}
    message = str(params.get("message") or "").strip()
    if method == constants.METHOD_ELICIT and params.get("mode") == "url":
        return (
            f"the user must open {params.get('url')} ({message}); once they have, answer "
            '{"action": "accept"} (or {"action": "decline"})'
        )
    if method == constants.METHOD_ELICIT:
        schema = params.get("requestedSchema")
        return (
            f"question {message!r}; answer "
            '{"action": "accept", "content": {...}} with content matching '
            f'{_compact(schema)}, or {{"action": "decline"}}'
        )
    if method == "sampling/createMessage":
        return (
            f"a model completion of {_compact(params.get('messages'))}; answer "
            '{"role": "assistant", "content": {"type": "text", "text": "..."}, "model": "<your model>"}'
        )
    if method == "roots/list":
        return 'the client\'s roots; answer {"roots": [{"uri": "file:///...", "name": "..."}]}'
    return f"{method} {_compact(params)}"


async def _respond(ctx: RequestContext, task_id: str, responses: JsonObject, follow: FollowTools) -> JsonObject:
    """`task_respond`: `tasks/update` for the caller's task; an answer that does not fit is a tool error.

    Raises:
        TaskNotFound: as `tasks/update`.
    """
    try:
        await task_methods.update_task(
            ctx, UpdateTaskRequestParams.model_validate({"taskId": task_id, "inputResponses": responses})
        )
    except InvalidInputResponse as exc:
        return error_result(f"Not delivered: {exc}. Call `{follow.status}` to see the questions again.")
    keys = ", ".join(json.dumps(key) for key in responses) or "no keys"
    text = (
        f"Delivered the answers ({keys}) to task {task_id}; answers to keys it no longer waits for are ignored. "
        f"Call `{follow.status}` to follow it."
    )
    return {
        "content": [{"type": "text", "text": text}],
        "structuredContent": {"taskId": task_id},
        "isError": False,
        "_meta": {constants.META_HANDOFF_TASK_ID: task_id},
    }


async def _cancel(ctx: RequestContext, task_id: str, follow: FollowTools) -> JsonObject:
    """`task_cancel`: `tasks/cancel` for the caller's task (a finished task gets the same answer).

    Raises:
        TaskNotFound: as `tasks/cancel`.
    """
    await task_methods.cancel_task(ctx, TaskRequestParams.model_validate({"taskId": task_id}))
    text = f"Asked task {task_id} to stop; stopping is cooperative. Call `{follow.status}` to see it end."
    return {
        "content": [{"type": "text", "text": text}],
        "structuredContent": {"taskId": task_id},
        "isError": False,
        "_meta": {constants.META_HANDOFF_TASK_ID: task_id},
    }
