"""`subscriptions/listen` with the tasks filter: `notifications/tasks` on the POST's SSE stream.

SEP-2575 §subscriptions and SEP-2663 §Notifications. The first frame is the acknowledgement with the
agreed filter: `taskIds` keeps only ids the caller owns (unknown and foreign ids are silently left
out, so the ack reveals nothing), and no other notification type is offered. Then the current state
of each agreed task is pushed, followed by every change as a full `DetailedTask`. Every frame carries
`_meta.subscriptionId` = the listen request's JSON-RPC id. When every agreed task is terminal, or the
server shuts down, the listen request's own response ends the stream. Polling stays the baseline.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from aiohttp import web

from mcp_tasks import aio
from mcp_tasks.gateway.context import RequestContext
from mcp_tasks.gateway.responses import SSE_HEADERS, sse_frame
from mcp_tasks.gateway.task_methods import render_task
from mcp_tasks.observability import metrics
from mcp_tasks.protocol import constants
from mcp_tasks.protocol.errors import InvalidParams, JsonObject, MissingRequiredClientCapability
from mcp_tasks.protocol.jsonrpc import notification, result_response
from mcp_tasks.protocol.params import ListenParams
from mcp_tasks.tasks.errors import TaskNotFound
from mcp_tasks.tasks.interfaces import TaskStore

logger = logging.getLogger("mcp_tasks.gateway")

SHUTDOWN_KEY: Final = web.AppKey("listen_shutdown", asyncio.Event)


async def wait_for_change_or_shutdown(
    store: TaskStore, shutdown: asyncio.Event, timeout_s: float, task_id: str | None = None
) -> bool:
    """Wait up to `timeout_s` seconds for a change (of `task_id`, or of any task); True once `shutdown` is set.

    The wait every open SSE stream makes between looks at the store (`subscriptions/listen`, legacy calls).
    """
    if shutdown.is_set():
        return True
    await aio.first_of(store.wait_for_change(timeout_s, task_id), shutdown.wait(), asyncio.sleep(timeout_s))
    return shutdown.is_set()


async def _agreed_task_ids(ctx: RequestContext, requested: object) -> list[str]:
    if requested is None:
        return []
    if not ctx.envelope.declares_tasks:
        raise MissingRequiredClientCapability.tasks_extension("notifications.taskIds on subscriptions/listen")
    limit = ctx.services.settings.listen_max_task_ids
    if not isinstance(requested, list) or not all(isinstance(t, str) for t in requested) or len(requested) > limit:
        raise InvalidParams(f"Invalid params: notifications.taskIds must be a list of at most {limit} task ids")
    agreed: list[str] = []
    for task_id in dict.fromkeys(requested):
        try:
            await ctx.services.store.get(task_id, ctx.owner)
        except TaskNotFound:
            continue
        agreed.append(task_id)
    return agreed


async def listen(ctx: RequestContext, params: ListenParams) -> web.StreamResponse:
    """Open the subscription stream on `ctx.request`. Validation errors are raised before the stream starts
    (JSON 400).
    """
    request = ctx.request
    filters = params.notifications
    task_ids = await _agreed_task_ids(ctx, filters.get("taskIds"))
    request_id = ctx.message.request_id
    assert request_id is not None  # notifications never reach handlers
    sub_meta = {constants.META_SUBSCRIPTION_ID: request_id}
    agreed: JsonObject = {"taskIds": task_ids} if "taskIds" in filters else {}

    response = web.StreamResponse(headers=SSE_HEADERS)
    shutdown = request.app[SHUTDOWN_KEY]
    streams = metrics.OPEN_STREAMS.labels("listen")
    streams.inc()
    try:
        await response.prepare(request)  # inside: a client gone already is a closed stream, not an error
        await response.write(
            sse_frame(
                notification(constants.NOTIFICATION_SUBSCRIPTION_ACK, {"_meta": sub_meta, "notifications": agreed})
            )
        )
        seen: dict[str, str] = {}
        keepalive = ctx.services.settings.listen_keepalive_s
        clock = asyncio.get_running_loop().time
        last_write = clock()
        while True:
            for task_id in list(task_ids):
                try:
                    record = await ctx.services.store.get(task_id, ctx.owner)
                except TaskNotFound:
                    task_ids.remove(task_id)
                    continue
                if seen.get(task_id) != record.version:
                    seen[task_id] = record.version
                    task = {**render_task(ctx, record), "_meta": sub_meta}
                    await response.write(sse_frame(notification(constants.NOTIFICATION_TASKS, task)))
                    last_write = clock()
                    if record.status.is_terminal:
                        task_ids.remove(task_id)
            if ("taskIds" in filters and not task_ids) or shutdown.is_set():
                final = ctx.complete({"_meta": dict(sub_meta)})
                await response.write(sse_frame(result_response(request_id, final)))
                break
            await wait_for_change_or_shutdown(ctx.services.store, shutdown, keepalive)
            # The store wakes us often (it polls for other processes), so pace keepalives by the clock.
            if clock() - last_write >= keepalive:
                await response.write(b": keepalive\n\n")
                last_write = clock()
    except (ConnectionResetError, ConnectionError):
        logger.debug("listen stream %s closed by the client", request_id)
    finally:
        streams.dec()
    return response
