"""Admission of a new task: the caller's creation rates and unfinished-task quota (docs/fair-share.md).

Called by every path that creates a task a client asked for (`tool_calls` for a task-augmented call,
`handoff.start` for a call handed off to a task, `legacy_calls` for a legacy-era call's hidden task),
before anything is stored. Refuses with
`tasks.errors.LimitReached`, which the one mapper answers 429 (`transport._DOMAIN_ERRORS`). Must never
write, and costs nothing when no rate or quota is set. The running budgets are not here: the executor
applies them when it claims (`tasks.fair_share`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from mcp_tasks.gateway.context import RequestContext
from mcp_tasks.gateway.rate_limits import Bucket, retry_after_ms
from mcp_tasks.observability import metrics
from mcp_tasks.tasks import fair_share
from mcp_tasks.tasks.errors import LimitReached
from mcp_tasks.tasks.interfaces import UnfinishedCount


@contextlib.asynccontextmanager
async def admit_creation(ctx: RequestContext) -> AsyncIterator[None]:
    """Hold the caller's right to create one more task for the block (docs/fair-share.md); nothing is stored
    when it refuses.

    First the creation rates (a token from the principal's bucket and from its tenant's, both or neither;
    memory only), then the unfinished-task quota (one count in the task store's index, up to the quota;
    from any store that counts, `interfaces.UnfinishedCount`: both do). A call refused by the quota has spent its
    tokens: an attempt counts against the rate whatever its outcome. With a quota, the count and the
    block (the create) hold one of `Services.quota_locks`, picked by the principal, so concurrent calls of
    one principal on this replica cannot both pass at its last free place (replicas still can, by one each).

    Raises:
        LimitReached: over `task_create_rate_per_principal` / `_per_tenant` (with `retry_after_ms`) or
            `max_unfinished_per_principal` (without: only finishing or cancelling tasks makes room). The
            gateway answers -32603 with HTTP 429 and `data.limit` (`transport._DOMAIN_ERRORS`).
    """
    services = ctx.services
    limits = services.limits
    if not limits.limits_creation:
        yield  # nothing to count: the create path pays nothing for limits it does not have
        return
    owner = ctx.owner
    own = limits.for_tenant(owner.tenant)
    refused = services.rate_limits.take(
        (
            Bucket(
                ("principal", owner),
                own.task_create_rate_per_principal,
                own.task_create_burst_per_principal,
                "task_create_rate_per_principal",
            ),
            Bucket(
                ("tenant", owner.tenant),
                own.task_create_rate_per_tenant,
                own.task_create_burst_per_tenant,
                "task_create_rate_per_tenant",
            ),
        )
    )
    if refused is not None:
        bucket, wait_s = refused
        metrics.LIMIT_REFUSALS.labels(bucket.limit, metrics.tenant_label(owner.tenant, limits.metrics_tenants)).inc()
        whose = "you" if bucket.limit.endswith("principal") else "your tenant"
        raise LimitReached(
            f"Too many tasks created: {whose} may create {bucket.rate_per_s:g} per second (burst {bucket.burst}, "
            f"{bucket.limit}); retry in {wait_s:.2f}s",
            bucket.limit,
            bucket.rate_per_s,
            retry_after_ms(wait_s),
        )
    quota = own.max_unfinished_per_principal
    store = services.store
    if not quota or not isinstance(store, UnfinishedCount):
        yield
        return
    locks = services.quota_locks
    async with locks[hash(owner) % len(locks)]:
        held = await store.unfinished_of(owner, quota)
        if fair_share.over_quota(held, owner, limits) is not None:
            label = metrics.tenant_label(owner.tenant, limits.metrics_tenants)
            metrics.LIMIT_REFUSALS.labels("max_unfinished_per_principal", label).inc()
            raise LimitReached(
                f"Too many unfinished tasks: you hold {held}, the most allowed (max_unfinished_per_principal); "
                "wait for some to finish, or cancel some with tasks/cancel, then call again",
                "max_unfinished_per_principal",
                quota,
            )
        yield
