"""A legacy-era (MCP 2025-11-25) `tools/call`: a hidden task followed on the POST's SSE stream.

A legacy client cannot poll a task, so its call is the stream: the tool runs as a task the client
never sees (durable, in the same store, run by the same executor as any task), and the replica that
took the POST follows the record and writes, in order:

- `notifications/progress` `{progressToken, progress, message}` whenever the task's `statusMessage`
  changes, when the request carried `_meta.progressToken` (2025-11-25 `utilities/progress`);
- each pending input request as a server-to-client JSON-RPC request (`elicitation/create`,
  `sampling/createMessage`, `roots/list`). Its `id` is `input_reply_id`: it names the task and the
  input key and carries an HMAC bound to the principal, so the client's response, POSTed to any
  replica, reaches the task through the store (`legacy.accept_reply`) and a forged or foreign id is
  refused like an unknown one;
- the call's response: the task's `CallToolResult`.

No session state: the server keeps nothing that outlives the request. It cannot know what
the client declared in `initialize`, so input requests are sent, and a client without a handler
answers with an error (-32601), which the tool sees as `ClientLacksCapability`.

Hidden task ids never repeat, so a call never meets the memory of an earlier call's deleted task (the
Kubernetes store and operator remember deleted McpTask names and take a task id as never reused):

- a call in a session (`Mcp-Session-Id`, `legacy_sessions`) gets `call_task_id`: an HMAC over
  (principal, session nonce, JSON-RPC id, generation 0..7). The nonce is 128 random bits minted by the
  gateway, and a client may not repeat an id within its session, so no earlier call had this id; the
  generation only separates the calls of a client that repeats one anyway (while the earlier task is
  kept). `notifications/cancelled {requestId}` with the session header, at any replica, derives the
  same ids and finds the call (`cancel_call`) without any lookup table;
- a call without a session header gets a random id (`mint_task_id`): its JSON-RPC id says nothing about
  which call it is (another connection of the principal may use the same id, before or at the same
  time). Its cancel is matched through `Services.live_calls`, the calls whose streams the receiving
  replica has open: exact in the embedded server (one process); behind several replicas, a cancel that
  lands on another replica than the call's stream is not matched (no store lookup by JSON-RPC id exists,
  and adding one would put the client-chosen id back into the records). Every official SDK echoes the
  session header, so this path serves hand-written clients, and their disconnect still cancels.

Either way a cancel acts only on exactly one open call under (principal, session, id); a finished call
with the same id never makes it ambiguous. A client that disconnects mid-call cancels it too. After
`legacy_call_timeout_s` the task is cancelled and the call ends with an `isError` result saying to
connect with the tasks extension.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import dataclasses
import hmac
import json
import logging
import re
from typing import Final

from aiohttp import web

from mcp_tasks.gateway import admission, legacy_sessions
from mcp_tasks.gateway.context import RequestContext, Services
from mcp_tasks.gateway.legacy_sessions import CallKey
from mcp_tasks.gateway.listen import SHUTDOWN_KEY, wait_for_change_or_shutdown
from mcp_tasks.gateway.responses import SSE_HEADERS, sse_frame
from mcp_tasks.observability import metrics, tracing
from mcp_tasks.protocol import constants
from mcp_tasks.protocol.errors import JsonObject, ServiceUnavailable
from mcp_tasks.protocol.jsonrpc import RequestId, error_response, notification, result_response
from mcp_tasks.tasks import transitions
from mcp_tasks.tasks.errors import StoreUnavailable, TaskNotFound, VersionConflict
from mcp_tasks.tasks.ids import TaskId, mint_task_id
from mcp_tasks.tasks.inline import call_outcome, hidden, keep_watching
from mcp_tasks.tasks.interfaces import Writer, transact
from mcp_tasks.tasks.owner import Owner
from mcp_tasks.tasks.record import TaskRecord
from mcp_tasks.tasks.results import error_result
from mcp_tasks.tasks.tools import ToolSpec

logger = logging.getLogger("mcp_tasks.gateway")

GENERATIONS: Final = 8
"""Task ids tried per (principal, session, request id): a client that repeats an id within its session
(which 2025-11-25 forbids) while the earlier call's task is kept takes the next; past them, a random id."""

INPUT_REPLY_PREFIX: Final = "mcptasks-input."
"""Prefix of the ids of the server-to-client requests we send; a client response with it is routed."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def call_task_id(secret: bytes, owner: Owner, session: str, request_id: RequestId, generation: int) -> TaskId:
    """The hidden task id of a legacy call in a session: 128 bits of HMAC over the principal, the session's
    nonce (`legacy_sessions.session_nonce`), the JSON-RPC id and the generation (0 to `GENERATIONS - 1`).
    """
    parts = (owner.tenant, owner.subject, owner.issuer, session, json.dumps(request_id), str(generation))
    return TaskId(legacy_sessions.mac(secret, "legacy-session-call", *parts))


def input_reply_id(secret: bytes, owner: Owner, task_id: str, key: str) -> str:
    """`mcptasks-input.<taskId>.<base64url key>.<HMAC>`: the id of the request that asks for input `key`."""
    mac = legacy_sessions.mac(secret, "legacy-input", owner.tenant, owner.subject, owner.issuer, task_id, key)
    return f"{INPUT_REPLY_PREFIX}{task_id}.{_b64(key.encode())}.{mac}"


_HEX32: Final = re.compile(r"^[0-9a-f]{32}$")


def parse_input_reply_id(secret: bytes, owner: Owner, reply_id: str) -> tuple[str, str] | None:
    """`(taskId, key)` of a genuine `input_reply_id` issued to `owner`, else `None` (forged, foreign, malformed)."""
    parts = reply_id.removeprefix(INPUT_REPLY_PREFIX).split(".")
    if len(parts) != 3 or not _HEX32.match(parts[0]) or not _HEX32.match(parts[2]):
        return None
    task_id, encoded_key, mac = parts
    try:
        key = base64.urlsafe_b64decode(encoded_key + "=" * (-len(encoded_key) % 4)).decode()
        expected = legacy_sessions.mac(secret, "legacy-input", owner.tenant, owner.subject, owner.issuer, task_id, key)
    except (ValueError, binascii.Error, UnicodeError):  # not base64, not UTF-8, a lone surrogate
        return None
    return (task_id, key) if hmac.compare_digest(mac, expected) else None


class _ClientGone(ConnectionError):
    """The client closed the connection while its call was running."""


class _ServerStopping(Exception):
    """The server is shutting down while the call runs: its hidden task is cancelled."""


async def _create(ctx: RequestContext, tool: ToolSpec, arguments: JsonObject, session: str | None) -> TaskRecord:
    """Insert the hidden task: in a session, under the first free derived id (a random one once all are
    taken); without one, under a random id. Admitted as any task a client asks for (the caller's creation
    rates and unfinished-task quota, `admission.admit_creation`), nothing stored when refused.

    Raises:
        LimitReached: a rate or the quota refuses (the legacy answer: the same JSON-RPC error, HTTP 200).
    """
    async with admission.admit_creation(ctx):
        return await _insert(ctx, tool, arguments, session)


async def _insert(ctx: RequestContext, tool: ToolSpec, arguments: JsonObject, session: str | None) -> TaskRecord:
    """`_create` once admitted."""
    services = ctx.services
    request_id = ctx.message.request_id
    assert request_id is not None  # notifications never reach a call
    fresh = transitions.new_task(mint_task_id(), ctx.owner, tool, arguments, services.clock())
    fresh = hidden(fresh, services.settings.caller_watch_s)
    secret = services.settings.request_state_secret
    meta = ctx.params.get("_meta")
    client_trace = tracing.valid_traceparent(meta.get(tracing.META_TRACEPARENT) if isinstance(meta, dict) else None)
    with tracing.span("mcp.task.create", client_trace, {"mcp.tool": tool.name}, server=True) as traceparent:
        fresh = dataclasses.replace(fresh, traceparent=traceparent)
        for generation in range(GENERATIONS if session is not None else 0):
            task_id = call_task_id(secret, ctx.owner, str(session), request_id, generation)
            try:
                created = await services.store.create(dataclasses.replace(fresh, task_id=task_id))
            except VersionConflict:
                continue
            return created
    if session is not None:
        logger.info("legacy call %r: every derived task id of its session is taken; it gets a random one", request_id)
    return await services.store.create(fresh)


CANCELLED_BY_CLIENT: Final = "notifications/cancelled"
"""`cancel_requested_by` of a hidden task its client cancelled: its call then ends without a response."""


async def _request_cancel(services: Services, task_id: str, why: str) -> None:
    logger.info("cancelling the hidden task %s of a legacy call: %s", task_id, why)
    by = CANCELLED_BY_CLIENT if why == CANCELLED_BY_CLIENT else "gateway"
    with contextlib.suppress(TaskNotFound, StoreUnavailable, VersionConflict):
        await transact(
            services.store,
            task_id,
            lambda r: (transitions.request_cancel(r, by, services.clock()), None),
            Writer.CLIENT,
        )


async def cancel_call(services: Services, owner: Owner, request_id: object, session: str | None) -> None:
    """`notifications/cancelled {requestId}`: cancel the owner's open call with that id in `session`, if unambiguous.

    `session` is the nonce of the notification's verified `Mcp-Session-Id`, or `None` without one. The
    calls this replica follows are looked at first (`Services.live_calls`); a session's call followed by
    another replica is found through the store at its derived ids (generations in order, up to the first
    that does not exist: they are taken in order). It acts only when exactly one open call matches;
    finished calls with the same id do not count. Cooperative, like `tasks/cancel`; an id with no open call
    is ignored (2025-11-25 `utilities/cancellation`: the receiver MAY ignore a cancellation it cannot match).
    """
    if not isinstance(request_id, str | int) or isinstance(request_id, bool):
        return
    matches = set(services.live_calls.find(CallKey.of(owner, session, request_id)))
    if not matches and session is not None:
        secret = services.settings.request_state_secret
        for generation in range(GENERATIONS):
            try:
                record = await services.store.get(call_task_id(secret, owner, session, request_id, generation), owner)
            except TaskNotFound:
                break
            if not record.status.is_terminal:
                matches.add(record.task_id)
    if len(matches) != 1:
        if matches:
            count = len(matches)
            logger.info("notifications/cancelled for %r matches %d open calls; ignored", request_id, count)
        return
    await _request_cancel(services, matches.pop(), CANCELLED_BY_CLIENT)


async def stream_call(
    request: web.Request, ctx: RequestContext, tool: ToolSpec, arguments: JsonObject, session: str | None
) -> web.StreamResponse:
    """Run `tool` as a hidden task and answer the call on an SSE stream (see the module docstring).

    `session` is the nonce of the request's verified `Mcp-Session-Id`, or `None` when it sent none.

    Raises (before the stream starts, answered as JSON by the caller):
        StoreUnavailable: the hidden task could not be created.
        LimitReached: the caller's creation rates or unfinished-task quota refuse it (nothing stored).
    """
    services = ctx.services
    request_id = ctx.message.request_id
    assert request_id is not None
    record = await _create(ctx, tool, arguments, session)
    with services.live_calls.following(CallKey.of(ctx.owner, session, request_id), record.task_id):
        return await _stream(request, ctx, record)


async def _stream(request: web.Request, ctx: RequestContext, record: TaskRecord) -> web.StreamResponse:
    """Answer the call on an SSE stream while its hidden task `record` runs; cancel the task if nobody
    will read its result (the client left, or the server is stopping).
    """
    services = ctx.services
    request_id = ctx.message.request_id
    assert request_id is not None
    meta = ctx.params.get("_meta")
    progress_token = meta.get(constants.META_PROGRESS_TOKEN) if isinstance(meta, dict) else None
    response = web.StreamResponse(headers=SSE_HEADERS)
    finished = False
    streams = metrics.OPEN_STREAMS.labels("call")
    streams.inc()
    try:
        await response.prepare(request)
        try:
            outcome = await _follow(request, response, ctx, record, progress_token)
        except _ServerStopping:
            stopping = ServiceUnavailable("The server is shutting down; the call was cancelled: call the tool again")
            await response.write(sse_frame(error_response(request_id, stopping)))
            finished = True
            return response
        except StoreUnavailable as exc:  # the stream is open: the error becomes the call's response on it
            logger.warning("legacy call %r lost the task store: %s", request_id, exc)
            error = ServiceUnavailable(f"The task store is unavailable ({exc}); call the tool again")
            await response.write(sse_frame(error_response(request_id, error)))
            finished = True
            return response
        if outcome is not None:  # None: the client cancelled the call, and gets no response (2025-11-25)
            await response.write(sse_frame(result_response(request_id, outcome)))
        finished = True
    except (ConnectionResetError, ConnectionError):
        logger.debug("legacy call %r: the client disconnected", request_id)
    finally:
        streams.dec()
        if not finished:  # disconnected, or the server is stopping: nobody will read the result
            await asyncio.shield(_request_cancel(services, record.task_id, "the client is gone"))
    return response


async def _follow(
    request: web.Request, response: web.StreamResponse, ctx: RequestContext, record: TaskRecord, progress_token: object
) -> JsonObject | None:
    """Write progress and input requests until the task is terminal; return the call's `CallToolResult`,
    or `None` when the client cancelled the call (`notifications/cancelled`).
    """
    services = ctx.services
    settings = services.settings
    secret = settings.request_state_secret
    clock = asyncio.get_running_loop().time
    deadline = clock() + settings.legacy_call_timeout_s
    last_write = clock()
    asked: set[str] = set()
    last_message = record.status_message
    progress = 0
    while True:
        record = await services.store.get(record.task_id)
        outcome = call_outcome(record)
        if outcome is not None:
            return None if record.cancel_requested_by == CANCELLED_BY_CLIENT else outcome
        if request.transport is None or request.transport.is_closing():
            raise _ClientGone(record.task_id)
        frames: list[JsonObject] = []
        if record.status_message != last_message and record.status_message and _is_token(progress_token):
            progress += 1
            params = {"progressToken": progress_token, "progress": progress, "message": record.status_message}
            frames.append(notification(constants.NOTIFICATION_PROGRESS, params))
        last_message = record.status_message
        for key, input_request in record.input_requests.items():
            if key not in asked:
                asked.add(key)
                frames.append(
                    {
                        "jsonrpc": "2.0",
                        "id": input_reply_id(secret, ctx.owner, record.task_id, key),
                        "method": input_request.get("method"),
                        "params": input_request.get("params") or {},
                    }
                )
        for frame in frames:
            await response.write(sse_frame(frame))
            last_write = clock()
        remaining = deadline - clock()
        if remaining <= 0:
            await _request_cancel(services, record.task_id, "legacy_call_timeout_s reached")
            return error_result(
                f"Tool {record.tool!r} did not finish within {settings.legacy_call_timeout_s:g}s, the longest a "
                "call without the tasks extension stays open; connect with MCP 2026-07-28 and the "
                f"{constants.TASKS_EXTENSION} extension to run it as a task"
            )
        await keep_watching(services.store, record, services.clock(), settings.caller_watch_s)
        wait_s = min(remaining, settings.listen_keepalive_s, settings.caller_watch_s / 4)
        if await wait_for_change_or_shutdown(services.store, request.app[SHUTDOWN_KEY], wait_s, record.task_id):
            await _request_cancel(services, record.task_id, "the server is shutting down")
            raise _ServerStopping(record.task_id)
        if clock() - last_write >= settings.listen_keepalive_s:
            await response.write(b": keepalive\n\n")
            last_write = clock()


def _is_token(value: object) -> bool:
    """A `progressToken` is a string or an integer (2025-11-25 `ProgressToken`)."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))
