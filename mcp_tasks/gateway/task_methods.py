"""`tasks/get`, `tasks/update`, `tasks/cancel` (SEP-2663), authorized by owner.

The capability gate (-32021) and the params (`TaskRequestParams`, -32602) are checked in dispatch before
these, so an unknown id from a non-declaring client never reaches a lookup. Another owner's task, an
expired task and an unknown id all raise the store's `TaskNotFound`, which the one mapper answers as the
same -32602 with the same message (`transport._DOMAIN_ERRORS`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from mcp_tasks.gateway.context import RequestContext
from mcp_tasks.observability import metrics
from mcp_tasks.protocol import constants
from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.protocol.models import GetTaskResult, TaskRequestParams, TaskStatus, UpdateTaskRequestParams
from mcp_tasks.tasks import fair_share, transitions
from mcp_tasks.tasks.interfaces import FairQueue, Writer, transact
from mcp_tasks.tasks.record import TaskRecord

logger = logging.getLogger("mcp_tasks.gateway")


def render_task(ctx: RequestContext, record: TaskRecord) -> JsonObject:
    """The `DetailedTask` wire object of a record; an inlined result gets its own serverInfo `_meta`."""
    task = record.to_wire_task().to_wire()
    inner = task.get("result")
    if isinstance(inner, dict):
        inner.setdefault("resultType", constants.RESULT_TYPE_COMPLETE)
        meta = inner.get("_meta")
        inner["_meta"] = {**meta, **ctx.server_meta()} if isinstance(meta, dict) else ctx.server_meta()
    return task


async def get_task(ctx: RequestContext, params: TaskRequestParams) -> JsonObject:
    """`tasks/get` → `GetTaskResult` (`resultType: "complete"`, status payload inlined).

    Raises:
        TaskNotFound: the task is not this owner's, expired or unknown (-32602, one answer for all three).
    """
    services = ctx.services
    record = await services.store.get(params.task_id, ctx.owner)
    if services.poll_pace.too_soon(record.task_id, record.poll_interval_ms):
        metrics.FAST_POLLS.labels(metrics.tenant_label(ctx.owner.tenant, services.limits.metrics_tenants)).inc()
    task = render_task(ctx, record)
    task["resultType"] = GetTaskResult.model_fields["result_type"].default
    if record.lease is None and record.status is TaskStatus.WORKING and isinstance(services.store, FairQueue):
        task["statusMessage"] = await _queued_message(ctx, services.store, record)
    return ctx.complete(task)


async def _queued_message(ctx: RequestContext, store: FairQueue, record: TaskRecord) -> str:
    """The `statusMessage` of a task waiting for a slot, computed on read (`fair_share.queued_message`).

    Computed here, not written by the executor: a message kept current in the store would cost a write
    per queued task at every claim. One count in the store's index of the tenant's queued tasks, up to
    `fair_share.AHEAD_COUNTED_MAX`; with running budgets set, one more of the tenant's leased tasks, to say
    when its own budget holds it. Nothing about other tenants. A read sooner than the task's `pollIntervalMs`
    after the last count gets that count's message (`QueuedMessages`).
    """
    recent = ctx.services.queued_messages.recent(record.task_id, record.poll_interval_ms)
    if recent is not None:
        return recent
    ahead = await store.queued_ahead(record, fair_share.AHEAD_COUNTED_MAX)
    limits = ctx.services.limits
    held_by = None
    if limits.limits_running:
        tenant_runs, own_runs = await store.running_of(record.owner, ctx.services.clock())
        usage = fair_share.Usage({record.owner.tenant: tenant_runs}, {record.owner: own_runs})
        held_by = fair_share.over_budget(record.owner, usage, limits)
    message = fair_share.queued_message(ahead, held_by)
    ctx.services.queued_messages.keep(record.task_id, message)
    return message


async def _client_write(
    ctx: RequestContext, task_id: str, change: Callable[[TaskRecord], TaskRecord], confirm_no_change: bool = False
) -> JsonObject:
    """Apply the client's `change` to its own task (compare-and-swap as `Writer.CLIENT`) and ack with `{}`.

    Raises:
        TaskNotFound: the task is not this owner's, expired or unknown (-32602, one answer for all three).
    """
    await transact(
        ctx.services.store,
        task_id,
        lambda record: (change(record), None),
        Writer.CLIENT,
        owner=ctx.owner,
        confirm_no_change=confirm_no_change,
    )
    return ctx.complete({})


async def update_task(ctx: RequestContext, params: UpdateTaskRequestParams) -> JsonObject:
    """`tasks/update`: answered keys leave `inputRequests` before the ack; unknown keys are ignored.

    Raises:
        TaskNotFound: as `tasks/get` (-32602).
        InvalidInputResponse: an answer does not fit the request it answers (-32602 naming the key).
    """
    now = ctx.services.clock
    return await _client_write(
        ctx,
        params.task_id,
        lambda r: transitions.answer_input_requests(r, params.input_responses, now()),
        confirm_no_change=True,  # an answer is never ignored on a cached copy behind another replica
    )


async def cancel_task(ctx: RequestContext, params: TaskRequestParams) -> JsonObject:
    """`tasks/cancel`: record the request and ack at once; a terminal task gets the same ack.

    Raises:
        TaskNotFound: as `tasks/get` (-32602).
    """
    now = ctx.services.clock
    return await _client_write(ctx, params.task_id, lambda r: transitions.request_cancel(r, ctx.owner.subject, now()))
