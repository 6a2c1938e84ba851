"""The legacy era (MCP 2025-11-25 and older) on the same `POST /mcp`, served without a session.

MCP 2026-07-28 `versioning.mdx` lets one endpoint serve both eras; an `initialize` selects legacy
semantics. A request is legacy (`selects_legacy`) when its `params._meta` names no
`io.modelcontextprotocol/protocolVersion` and its `MCP-Protocol-Version` header is absent or a legacy
revision; everything else stays on the modern path unchanged (an `initialize` with a modern `_meta`
is still -32601/404).

Served (rows of `dispatch.ROUTES` in the legacy era; the handlers that differ from the modern era's are
here): `initialize`, `notifications/initialized`, `ping`, `tools/list`, `tools/call`, `resources/list`,
`resources/templates/list`, `resources/read`, `notifications/cancelled`; and, before any method is
looked up, the client's JSON-RPC responses to the input requests a call streamed (`accept_reply`).
`transport` frames the answers: `legacy_form` results, errors with HTTP 200. Nothing is kept per
connection, so any replica answers any legacy request. `initialize` is answered with an `Mcp-Session-Id`
that holds no server state: a random nonce signed with the gateway's key (`legacy_sessions`), which
scopes the client's JSON-RPC ids (its calls' hidden task ids and cancels); a legacy request whose
`Mcp-Session-Id` does not verify gets 404, so the client initializes again (2025-11-25 `transports.mdx`
§Session Management). Not served: the 2025-11-25 experimental tasks API (`tasks/result`, `tasks/list`, a
`task` request parameter): -32601 or ignored, as the tasks extension's migration table asks. JSON-RPC
errors to legacy requests travel with HTTP 200 (their clients treat any other status as a transport
failure); refusals at the door (401, 403, 404 for an unknown session, 413, ...) are unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

from aiohttp import web

from mcp_tasks.gateway import discovery, handoff, legacy_calls, legacy_sessions, tool_calls
from mcp_tasks.gateway.context import ClientGone, Era, RequestContext, Services, client_gone
from mcp_tasks.gateway.identity.principal import Identity
from mcp_tasks.gateway.responses import json_response
from mcp_tasks.protocol import constants
from mcp_tasks.protocol.errors import InvalidParams, InvalidRequest, JsonObject
from mcp_tasks.protocol.headers import RequestEnvelope
from mcp_tasks.protocol.jsonrpc import Message, error_response, result_response
from mcp_tasks.protocol.params import CallToolParams, CancelledParams, InitializeParams, NoParams, PageParams
from mcp_tasks.tasks import transitions
from mcp_tasks.tasks.errors import InvalidInputResponse, TaskNotFound
from mcp_tasks.tasks.interfaces import InputNeeded, Writer, transact
from mcp_tasks.tasks.owner import Owner
from mcp_tasks.tasks.record import TaskRecord
from mcp_tasks.tasks.results import error_result
from mcp_tasks.tasks.tools import TaskPolicy

logger = logging.getLogger("mcp_tasks.gateway")

_MODERN_ONLY: Final = frozenset({constants.METHOD_DISCOVER, constants.METHOD_SUBSCRIPTIONS_LISTEN})
"""Methods that exist only in the modern era: without `_meta` they get the modern -32602 naming it."""

_MODERN_ONLY_RESULT_KEYS: Final = ("resultType", "ttlMs", "cacheScope")


def selects_legacy(headers: Mapping[str, str], message: Message) -> bool:
    """True when `message` speaks the legacy era; pure, headers case-insensitive.

    Legacy: no `io.modelcontextprotocol/protocolVersion` in `params._meta`, and either a legacy
    `MCP-Protocol-Version` header, or no header at all (`initialize` comes without one, and 2025-03-26
    clients never send it) with any method but the modern-only ones: an unserved method is then a
    legacy -32601. So `server/discover` without `_meta` is still the modern -32602.
    """
    meta = message.params.get("_meta")
    if isinstance(meta, dict) and constants.META_PROTOCOL_VERSION in meta:
        return False
    header = headers.get(constants.HEADER_PROTOCOL_VERSION, "").strip()
    if header:
        return header in constants.LEGACY_PROTOCOL_VERSIONS
    return message.method not in _MODERN_ONLY


def is_input_reply(payload: Any) -> bool:
    """True for a client's JSON-RPC response to one of our input requests (its id has our prefix)."""
    return (
        isinstance(payload, dict)
        and "method" not in payload
        and ("result" in payload or "error" in payload)
        and isinstance(payload.get("id"), str)
        and payload["id"].startswith(legacy_calls.INPUT_REPLY_PREFIX)
    )


def context(
    request: web.Request, message: Message, identity: Identity, services: Services, session: str | None
) -> RequestContext:
    """The `RequestContext` of a legacy-era request; it declares no capabilities (they were said in
    `initialize`, which is not kept). `session` is the nonce of its verified `Mcp-Session-Id`, if any.
    """
    headers = request.headers
    version = headers.get(constants.HEADER_PROTOCOL_VERSION, "").strip() or constants.LEGACY_DEFAULT_VERSION
    envelope = RequestEnvelope(protocol_version=version, client_capabilities={}, meta={})
    return RequestContext(
        message, Era.LEGACY, envelope, identity, headers, services, request, session, client_gone(request)
    )


def legacy_form(result: JsonObject) -> JsonObject:
    """Drop the 2026-07-28-only result fields (`resultType`, cache hints) a legacy client does not know."""
    return {key: value for key, value in result.items() if key not in _MODERN_ONLY_RESULT_KEYS}


async def initialize(ctx: RequestContext, params: InitializeParams) -> web.Response:
    """`initialize` → `InitializeResult` (the requested legacy revision when served, else our newest legacy
    one) with a new `Mcp-Session-Id`: a signed nonce, no server state (`legacy_sessions`).
    """
    served = constants.LEGACY_PROTOCOL_VERSIONS
    version = params.protocol_version if params.protocol_version in served else served[0]
    settings = ctx.services.settings
    result: JsonObject = {
        "protocolVersion": version,
        "capabilities": {"tools": {}, "resources": {}},
        "serverInfo": {"name": settings.server_name, "version": settings.server_version},
        "instructions": (
            "Every tool can be called; long ones stream progress and input requests on the call's response. "
            f"Clients with MCP 2026-07-28 and the {constants.TASKS_EXTENSION} extension get durable tasks instead."
            + handoff.instructions(ctx)
        ),
    }
    request_id = ctx.message.request_id
    assert request_id is not None  # a notification never reaches a request's row
    reply = json_response(result_response(request_id, result))
    reply.headers[constants.HEADER_SESSION_ID] = legacy_sessions.mint_session_id(
        settings.request_state_secret, ctx.owner
    )
    return reply


async def ping(ctx: RequestContext, params: NoParams) -> JsonObject:
    """`ping` → `{}` (2025-11-25 `utilities/ping`)."""
    return {}


async def initialized(ctx: RequestContext, params: NoParams) -> JsonObject:
    """`notifications/initialized`: nothing to do, no state is kept between requests."""
    return {}


async def cancelled(ctx: RequestContext, params: CancelledParams) -> JsonObject:
    """`notifications/cancelled {requestId}`: cancel the caller's open call with that id in its session
    (`legacy_calls.cancel_call`). A notification gets no answer; `transport` only logs a failure.
    """
    await legacy_calls.cancel_call(ctx.services, ctx.owner, params.request_id, ctx.session)
    return {}


async def list_tools(ctx: RequestContext, params: PageParams) -> JsonObject:
    """`tools/list` as 2025-11-25 lists tools (`_legacy_tool`): the modern era's page, scopes and cursor."""
    listed = await discovery.list_tools(ctx, params)
    return {**listed, "tools": [_legacy_tool(tool) for tool in listed["tools"]]}


class UnknownSession(Exception):
    """The request's `Mcp-Session-Id` was not issued by this gateway to this principal (or its key changed)."""


def session_of(headers: Mapping[str, str], owner: Owner, services: Services) -> str | None:
    """The nonce of the request's `Mcp-Session-Id`, or `None` when it carries none (an empty one is none).

    Raises:
        UnknownSession: the header is present but does not verify (answered 404: initialize again).
    """
    value = headers.get(constants.HEADER_SESSION_ID, "").strip()
    if not value:
        return None
    nonce = legacy_sessions.session_nonce(services.settings.request_state_secret, owner, value)
    if nonce is None:
        raise UnknownSession(value[:80])
    return nonce


def session_not_found(request_id: object) -> web.Response:
    """HTTP 404 with a -32600 naming the header: the client must send `initialize` again without it
    (2025-11-25 `transports.mdx` §Session Management).
    """
    error = InvalidRequest(
        f"Session not found: this {constants.HEADER_SESSION_ID} was not issued by this server (or its key "
        "changed); send initialize again without it"
    )
    rid = request_id if isinstance(request_id, str | int) and not isinstance(request_id, bool) else None
    return json_response(error_response(rid, error), 404)


async def call_tool(ctx: RequestContext, params: CallToolParams) -> web.StreamResponse | JsonObject:
    """Legacy `tools/call`: quick tools run as a synchronous call does; others as a streamed hidden task.

    A tool with `inputBeforeTask` runs as a hidden task too: the legacy era has no pre-creation round,
    so its tool's runtime asks those requests first, in-task, on the call's stream (`ToolContext.
    collect_input_before_task`), and a declined one ends the call without the tool starting.

    A tool that hands off (`handoff`) answers at once with a result naming its task, a plain
    `CallToolResult`; the follow tools (`task_status`, ...) are served as in the modern era.
    """
    if handoff.serves(ctx, params.name):
        return await handoff.follow(ctx, params)
    tool = tool_calls.requested_tool(ctx, params)
    name = tool.name
    arguments = params.arguments
    problems = tool.argument_errors(arguments)
    if problems:
        return error_result(f"Invalid arguments for tool {name!r}: " + "; ".join(problems))
    if handoff.hands_off(ctx, tool):
        return await handoff.start(ctx, tool, arguments)
    if tool.execution.task_policy is TaskPolicy.NEVER:
        try:
            return dict(await tool_calls.run_inline(ctx, tool, arguments, {}, None))
        except ClientGone:
            return error_result(f"Tool {name!r} was stopped: the client closed the connection")
        except InputNeeded:
            return error_result(f"Tool {name!r} asked for input, which it may not do in a synchronous call")
        except TimeoutError:
            return error_result(f"Tool {name!r} did not finish within {tool.execution.sync_timeout_seconds:g}s")
    return await legacy_calls.stream_call(ctx.request, ctx, tool, arguments, ctx.session)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _legacy_tool(tool: JsonObject) -> JsonObject:
    """A `Tool` as 2025-11-25 lists it: without the 2026-07-28 `execution.taskPolicy` hint."""
    execution = tool.get("execution")
    if not isinstance(execution, dict):
        return tool
    kept = {key: value for key, value in execution.items() if key != "taskPolicy"}
    return {**{k: v for k, v in tool.items() if k != "execution"}, **({"execution": kept} if kept else {})}


async def accept_reply(
    payload: JsonObject, owner: Owner, services: Services, headers: Mapping[str, str]
) -> web.Response:
    """Deliver a client's response to one of our input requests to its task, on any replica.

    202 when it answered a pending request of the caller's own call. A forged id, another principal's,
    one whose call ended, or one already answered: 400 with the same -32602 (2025-11-25 transport: a
    response the server cannot accept gets an HTTP error status). An answer that does not fit its
    request (an `ElicitResult` without `action`): 400 with a -32602 naming the key. An `Mcp-Session-Id`
    in `headers` that does not verify: 404, as for any legacy request.
    """
    try:
        session_of(headers, owner, services)  # the reply's own id routes it; a session only has to be genuine
    except UnknownSession:
        return session_not_found(None)
    refused = InvalidParams("Invalid params: no pending request has this id; it may have ended or been answered")
    if payload.get("jsonrpc") != "2.0":
        return json_response(error_response(None, InvalidRequest('Invalid Request: "jsonrpc" must be "2.0"')), 400)
    answer = payload.get("result")
    error = payload.get("error")
    if ("result" in payload) == ("error" in payload):
        return json_response(error_response(None, InvalidRequest("Invalid Request: send result or error")), 400)
    if "error" in payload and not (
        isinstance(error, dict) and _is_int(error.get("code")) and isinstance(error.get("message"), str)
    ):
        shape = InvalidParams("Invalid params: error must be a JSON-RPC error object {code: integer, message: string}")
        return json_response(error_response(None, shape), 400)
    if "result" in payload and not isinstance(answer, dict):
        return json_response(error_response(None, InvalidParams("Invalid params: result must be an object")), 400)
    parsed = legacy_calls.parse_input_reply_id(services.settings.request_state_secret, owner, payload["id"])
    if parsed is None:
        return json_response(error_response(None, refused), 400)
    task_id, key = parsed
    now = services.clock()

    def apply(record: TaskRecord) -> tuple[TaskRecord, bool]:
        if key not in record.input_requests:
            return record, False
        if isinstance(error, dict):
            return transitions.refuse_input_request(record, key, error, now), True
        return transitions.answer_input_requests(record, {key: answer}, now), True

    try:
        _record, delivered = await transact(
            services.store, task_id, apply, Writer.CLIENT, owner, confirm_no_change=True
        )
    except TaskNotFound:
        delivered = False
    except InvalidInputResponse as exc:  # names the key as `inputResponses[...]`; say it as this client sent it
        problem = str(exc).replace(f"inputResponses[{key!r}]", "result", 1)
        return json_response(error_response(None, InvalidParams(f"Invalid params: {problem}")), 400)
    if not delivered:
        return json_response(error_response(None, refused), 400)
    return web.Response(status=202)
