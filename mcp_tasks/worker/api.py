"""The worker API (on loopback embedded, a cluster Service for the operator): the HTTP side of the tool runtime
contract (`runtime.contract`).

Routes `/v1/executions/{id}/...`; every call must carry the execution's own bearer token, so a
tool process can act only on its own execution. Bodies are bounded (`max_body_bytes`). The
semantics live in `WorkerChannel` (worker.channel); this module only speaks HTTP.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Final, TypeGuard

from aiohttp import web

from mcp_tasks.observability import metrics, tracing
from mcp_tasks.observability.logs import bind_task
from mcp_tasks.protocol import jsonrpc
from mcp_tasks.protocol.errors import ParseError
from mcp_tasks.runtime import contract
from mcp_tasks.tasks.errors import StoreUnavailable
from mcp_tasks.worker.channel import ChannelError, WorkerChannel
from mcp_tasks.worker.executions import Execution, ExecutionLookup, ExecutionPending

logger = logging.getLogger("mcp_tasks.worker")

EXECUTIONS_KEY: Final = web.AppKey("executions", ExecutionLookup)
CHANNEL_KEY: Final = web.AppKey("channel", WorkerChannel)
EXECUTION_KEY: Final = web.RequestKey("execution", Execution)
ON_STARTED_KEY: Final[web.AppKey[Callable[[Execution], None]]] = web.AppKey("on_started")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def _execution(request: web.Request) -> Execution:
    values = request.headers.getall("Authorization", [])
    # One credential per request: a repeated header (which a proxy might read differently) is no token,
    # as the gateway and the warm workers treat it.
    auth = values[0] if len(values) == 1 else ""
    token = auth[7:] if auth.startswith("Bearer ") else ""
    execution = await request.app[EXECUTIONS_KEY].resolve(request.match_info["execution_id"], token)
    if execution is None:
        raise web.HTTPNotFound(text="unknown execution or wrong token")
    bind_task(execution.task_id, execution.tool.name if execution.tool is not None else None)
    request[EXECUTION_KEY] = execution
    return execution


async def _json_body(request: web.Request) -> dict[str, object]:
    try:
        body = jsonrpc.decode_body(await request.read())
    except ParseError as exc:
        raise web.HTTPBadRequest(text=f"body must be a JSON object: {exc.message}") from exc
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(text="body must be a JSON object")
    return body


async def get_input(request: web.Request) -> web.Response:
    """GET /input → arguments and pre-task input responses; the tool runs (`on_started` hears of it)."""
    execution = await _execution(request)
    try:
        arguments = await request.app[CHANNEL_KEY].arguments(execution)
    except ChannelError as error:
        return web.Response(status=error.status, text=str(error))
    request.app[ON_STARTED_KEY](execution)
    body: dict[str, object] = {
        "arguments": arguments,
        "inputResponses": execution.pre_input_responses,
        "taskId": execution.task_id,
        "attempt": execution.attempt,
    }
    unanswered = _unanswered_before_task(execution)
    if unanswered:
        body["inputBeforeTask"] = unanswered
    return web.json_response(body)


def _unanswered_before_task(execution: Execution) -> dict[str, object]:
    """The tool's `inputBeforeTask` requests its task was created without answers to, by key.

    A modern client answers them before the task exists (pre-creation MRTR); a legacy-era client has no
    such round, so its call's hidden task starts without them and the runtime asks them first, in-task.
    """
    if execution.tool is None or execution.task_id is None:
        return {}
    return {
        key: {"method": spec.method, "params": spec.params}
        for key, spec in execution.tool.manifest.input_before_task.items()
        if key not in execution.pre_input_responses
    }


async def post_status(request: web.Request) -> web.Response:
    """POST /status {statusMessage} → 204."""
    execution = await _execution(request)
    body = await _json_body(request)
    message = body.get("statusMessage")
    if not isinstance(message, str):
        return web.Response(status=400, text="statusMessage must be a string")
    try:
        await request.app[CHANNEL_KEY].set_status_message(execution, message)
    except ChannelError as error:
        return web.Response(status=error.status, text=str(error))
    return web.Response(status=204)


def _number(value: object) -> TypeGuard[float]:
    """A finite JSON number (not a boolean)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


async def post_progress(request: web.Request) -> web.Response:
    """POST /progress {progress, total?, message?} → 204."""
    execution = await _execution(request)
    body = await _json_body(request)
    progress, total, message = body.get("progress"), body.get("total"), body.get("message")
    if not _number(progress) or (total is not None and not _number(total)):
        return web.Response(status=400, text="progress (and total, when given) must be numbers")
    if message is not None and not isinstance(message, str):
        return web.Response(status=400, text="message must be a string")
    try:
        await request.app[CHANNEL_KEY].report_progress(execution, progress, total if _number(total) else None, message)
    except ChannelError as error:
        return web.Response(status=error.status, text=str(error))
    return web.Response(status=204)


async def post_input_requests(request: web.Request) -> web.Response:
    """POST /input-requests {inputRequests, roundId?} → {keys: {suggested: minted}}; 412 `{message, capability}`.

    `roundId` (optional, `contract.ROUND_ID_PATTERN`): the worker's id for this round; a retry with the id
    and the requests of the task's latest round gets that round's keys again (its first answer was lost),
    not new ones.
    """
    execution = await _execution(request)
    body = await _json_body(request)
    requests = body.get("inputRequests")
    if not isinstance(requests, dict) or not requests:
        return web.Response(status=400, text="inputRequests must be a non-empty object of {method, params}")
    round_id = body.get("roundId")
    if round_id is not None and not (isinstance(round_id, str) and contract.ROUND_ID_PATTERN.fullmatch(round_id)):
        return web.Response(status=400, text="roundId must be 1 to 64 letters, digits, '-' or '_'")
    try:
        keys = await request.app[CHANNEL_KEY].ask(execution, requests, round_id)
    except ChannelError as error:
        if error.capability is not None:
            return web.json_response({"message": str(error), "capability": error.capability}, status=error.status)
        return web.Response(status=error.status, text=str(error))
    return web.json_response({"keys": keys})


async def get_input_responses(request: web.Request) -> web.Response:
    """GET /input-responses?keys=a,b&waitMs=N → {inputResponses}."""
    execution = await _execution(request)
    keys = [key for key in request.query.get("keys", "").split(",") if key]
    try:
        wait_ms = min(int(request.query.get("waitMs", "0")), contract.MAX_WAIT_MS)
    except ValueError:
        return web.Response(status=400, text="waitMs must be an integer")
    try:
        responses = await request.app[CHANNEL_KEY].take_responses(execution, keys, wait_ms / 1000)
    except ChannelError as error:
        return web.Response(status=error.status, text=str(error))
    return web.json_response({"inputResponses": responses})


async def post_result(request: web.Request) -> web.Response:
    """POST /result {result} | {error, statusMessage} → 204."""
    execution = await _execution(request)
    body = await _json_body(request)
    try:
        await request.app[CHANNEL_KEY].finish(execution, body)
    except ChannelError as error:
        return web.Response(status=error.status, text=str(error))
    return web.Response(status=204)


async def healthz(request: web.Request) -> web.Response:
    """GET /healthz → 200 `{"status": "ok"}` while the worker API serves (the operator's probes)."""
    return web.json_response({"status": "ok"})


@web.middleware
async def _storage_faults(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Storage trouble is temporary for a tool: 503 with `Retry-After`, which the runtime retries with back-off.

    A task store that cannot write (`StoreUnavailable`: disk full, read-only, API server down) or an
    artifact that cannot be written (`OSError`) must not turn into a 500 that makes the tool give up.
    """
    try:
        return await handler(request)
    except ExecutionPending:
        return web.Response(status=503, headers={"Retry-After": "1"}, text="execution not ready yet; retry")
    except StoreUnavailable as exc:
        logger.warning("worker API: task store unavailable: %s", exc)
        return web.Response(status=503, headers={"Retry-After": "1"}, text=f"task store unavailable: {exc}")
    except OSError as exc:
        logger.warning("worker API: artifact store cannot write: %s", exc)
        return web.Response(
            status=503, headers={"Retry-After": "1"}, text=f"artifact store cannot write: {exc.strerror or exc}"
        )


@web.middleware
async def _metered(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Count worker API calls by route template (bounded: no execution id) and HTTP status."""
    resource = request.match_info.route.resource
    route = resource.canonical.removeprefix("/v1/executions/{execution_id}") if resource is not None else "other"
    started = time.time_ns()
    status = 500
    try:
        response = await handler(request)
        status = response.status
    except web.HTTPException as exc:
        status = exc.status
        raise
    finally:
        metrics.WORKER_API.labels(route or "/", str(status)).inc()
        execution = request.get(EXECUTION_KEY)
        if execution is not None and execution.traceparent is not None:
            tracing.record_span(f"mcp.worker {route}", execution.traceparent, started, {"http.status_code": status})
    return response


def create_worker_app(
    executions: ExecutionLookup,
    channel: WorkerChannel,
    max_body_bytes: int,
    on_started: Callable[[Execution], None] | None = None,
) -> web.Application:
    """The worker API application (the embedded runner serves it on 127.0.0.1 only), plus `GET /healthz`.

    `on_started` is called (quickly, it must not block) when a tool process first reads its input: the
    tool is running (the operator reports it as an Event).
    """
    app = web.Application(client_max_size=max_body_bytes, middlewares=[_metered, _storage_faults])
    app[EXECUTIONS_KEY] = executions
    app[CHANNEL_KEY] = channel
    app[ON_STARTED_KEY] = on_started or (lambda execution: None)
    base = "/v1/executions/{execution_id}"
    app.router.add_get(base + contract.PATH_INPUT, get_input)
    app.router.add_post(base + contract.PATH_STATUS, post_status)
    app.router.add_post(base + contract.PATH_PROGRESS, post_progress)
    app.router.add_post(base + contract.PATH_INPUT_REQUESTS, post_input_requests)
    app.router.add_get(base + contract.PATH_INPUT_RESPONSES, get_input_responses)
    app.router.add_post(base + contract.PATH_RESULT, post_result)
    app.router.add_get("/healthz", healthz)
    return app
