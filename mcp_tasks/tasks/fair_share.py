"""Fair share: which queued task gets the next slot, whether a run fits its budgets, and what a queued task
is told. Pure: no I/O, no clock of its own.

Every executor asks the same questions and must not re-implement the answers: the embedded runner's claim
path (`runner.claims`), the operator's admission of Jobs and its warm-task runner. They differ only in how
they count (`Usage`: the task store's leased rows, the operator's informer cache) and where the queue
comes from (`Queued`).

**The rule: weighted fair share over the slots in use, memoryless.** Each free slot goes to the tenant
with the lowest `running / weight` among the tenants that have a task waiting and are under their own
running budget (`max_running_per_tenant`), ties to the tenant whose waiting task is oldest. Within that
tenant, the principal with the fewest runs that is under `max_running_per_principal` (ties: oldest task),
and its oldest task. With equal weights this is round robin between the tenants that wait, in the order of
their oldest tasks, at each slot's turnover.

Why this and not a decaying usage history (Kueue's fair sharing, Slurm's fair-share factor): it needs no
state besides what is running now, so a restarted runner or a new operator leader decides the same from
the store or its cache, with nothing to persist or agree on; and it gives the bound the installation
promises: a tenant with nothing running is below every tenant that has something running, so while one
tenant's backlog fills every slot another tenant's task waits for at most one slot's turnover (the next
slot freed is its). A tenant that keeps its slots busy with long runs is not penalised later for it.

| situation (slots free: 1)                               | next slot                                    |
|---------------------------------------------------------|----------------------------------------------|
| A runs 2, B runs 0, both wait                           | B (0 < 2), however old A's backlog is        |
| A runs 1, B runs 1, both wait                           | the tenant whose waiting task is older       |
| A (weight 2) runs 2, B (weight 1) runs 1                | the older head (2/2 = 1/1)                   |
| A at `max_running_per_tenant`, B waits                  | B; A's tasks wait with nothing else free     |
| only A waits, at its own budget                         | nobody: the slot stays free                  |
| in A: alice runs 1, bob runs 0, both wait               | bob's oldest task                            |
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final, Literal

from mcp_tasks.tasks.limits import LimitSettings, TenantLimits
from mcp_tasks.tasks.owner import Owner

RunningLimit = Literal["max_running_per_tenant", "max_running_per_principal"]
"""The running budget a run would exceed (the `LimitSettings` field name, as errors and metrics name it)."""

QUEUED_PREFIX: Final = "queued: "
"""How every `statusMessage` of a task waiting for a slot starts (`queued_message`)."""
AHEAD_COUNTED_MAX: Final = 1000
"""Most tasks ahead a store counts for `queued_message` (a count is an index range: bounded, so is its cost)."""


@dataclass(frozen=True, slots=True)
class Queued:
    """A task waiting for a slot, as far as the policy needs it.

    Attributes:
        task_id: the task's id.
        owner: its principal (`tenant` is the tenant it counts against).
        created_at: when it was created, UTC; older goes first within a tenant.
    """

    task_id: str
    owner: Owner
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Usage:
    """What runs now, counted by tenant and by principal (task runs and synchronous calls alike).

    Attributes:
        by_tenant: tenant → runs.
        by_principal: principal → runs.
    """

    by_tenant: Mapping[str, int] = field(default_factory=dict)
    by_principal: Mapping[Owner, int] = field(default_factory=dict)

    @classmethod
    def of(cls, owners: Iterable[Owner]) -> Usage:
        """The usage of one run per item of `owners` (an owner may repeat)."""
        by_tenant: dict[str, int] = {}
        by_principal: dict[Owner, int] = {}
        for owner in owners:
            by_tenant[owner.tenant] = by_tenant.get(owner.tenant, 0) + 1
            by_principal[owner] = by_principal.get(owner, 0) + 1
        return cls(by_tenant, by_principal)

    @classmethod
    def counted(cls, rows: Iterable[tuple[Owner, int]]) -> Usage:
        """The usage of `(principal, runs)` rows (a principal may repeat; its counts add up)."""
        by_tenant: dict[str, int] = {}
        by_principal: dict[Owner, int] = {}
        for owner, runs in rows:
            by_tenant[owner.tenant] = by_tenant.get(owner.tenant, 0) + runs
            by_principal[owner] = by_principal.get(owner, 0) + runs
        return cls(by_tenant, by_principal)

    def plus(self, other: Usage) -> Usage:
        """Both usages together (e.g. the store's leased tasks and this process's synchronous calls)."""
        by_tenant = dict(self.by_tenant)
        by_principal = dict(self.by_principal)
        for tenant, runs in other.by_tenant.items():
            by_tenant[tenant] = by_tenant.get(tenant, 0) + runs
        for owner, runs in other.by_principal.items():
            by_principal[owner] = by_principal.get(owner, 0) + runs
        return Usage(by_tenant, by_principal)


def over_budget(owner: Owner, usage: Usage, limits: LimitSettings) -> RunningLimit | None:
    """The running budget one more run of `owner` would exceed, or `None` when it fits.

    The tenant's budget is tested first: it is the one a principal shares with the rest of its tenant.
    """
    own = limits.for_tenant(owner.tenant)
    return _held_by(own, usage.by_tenant.get(owner.tenant, 0), usage.by_principal.get(owner, 0))


def _held_by(limits: TenantLimits, tenant_runs: int, principal_runs: int) -> RunningLimit | None:
    if limits.max_running_per_tenant and tenant_runs >= limits.max_running_per_tenant:
        return "max_running_per_tenant"
    if limits.max_running_per_principal and principal_runs >= limits.max_running_per_principal:
        return "max_running_per_principal"
    return None


def over_quota(unfinished: int, owner: Owner, limits: LimitSettings) -> int | None:
    """The unfinished-task quota that one more task of `owner` would exceed, or `None` when it fits.

    Args:
        unfinished: the principal's unfinished tasks now (`working` or `input_required`).
        owner: the principal (its tenant's override applies).
        limits: the quotas.

    Returns:
        The quota (`max_unfinished_per_principal` of its tenant) when `unfinished` has reached it.
    """
    quota = limits.for_tenant(owner.tenant).max_unfinished_per_principal
    return quota if quota and unfinished >= quota else None


def _order(task: Queued) -> tuple[datetime, str]:
    return task.created_at, task.task_id


def pick(queued: Iterable[Queued], usage: Usage, limits: LimitSettings, slots: int) -> list[Queued]:
    """Up to `slots` of `queued`, in the order they get the free slots (the module's rule).

    Args:
        queued: tasks waiting for a slot, in any order; an executor may pass only each principal's oldest
            `slots` tasks (no more can be picked from one principal).
        usage: what runs now, before any of these.
        limits: the budgets and weights.
        slots: free slots of the executor (its global cap minus what it runs); <= 0 picks nothing.

    Returns:
        The tasks to start, first first; fewer than `slots` when the others are held by their budgets.
        Cost: O(slots * principals waiting).
    """
    lines: dict[str, dict[Owner, list[Queued]]] = {}
    for task in queued:
        lines.setdefault(task.owner.tenant, {}).setdefault(task.owner, []).append(task)
    for principals in lines.values():
        for line in principals.values():
            line.sort(key=_order, reverse=True)  # oldest last: popped first
    by_tenant = dict(usage.by_tenant)
    by_principal = dict(usage.by_principal)
    tenant_limits = {tenant: limits.for_tenant(tenant) for tenant in lines}
    chosen: list[Queued] = []
    while len(chosen) < slots:
        best: tuple[tuple[float, datetime, str], Owner] | None = None
        for tenant, principals in lines.items():
            own = tenant_limits[tenant]
            tenant_runs = by_tenant.get(tenant, 0)
            candidate: tuple[tuple[int, datetime, str], Owner] | None = None
            for owner, line in principals.items():
                runs = by_principal.get(owner, 0)
                if not line or _held_by(own, tenant_runs, runs) is not None:
                    continue
                key = (runs, *_order(line[-1]))
                if candidate is None or key < candidate[0]:
                    candidate = (key, owner)
            if candidate is None:
                continue
            share_key = (tenant_runs / own.weight, candidate[0][1], candidate[0][2])
            if best is None or share_key < best[0]:
                best = (share_key, candidate[1])
        if best is None:
            break
        owner = best[1]
        chosen.append(lines[owner.tenant][owner].pop())
        by_tenant[owner.tenant] = by_tenant.get(owner.tenant, 0) + 1
        by_principal[owner] = by_principal.get(owner, 0) + 1
    return chosen


def ahead(task: Queued, queued: Iterable[Queued]) -> int:
    """How many tasks of `task`'s tenant wait before it (created earlier; ties by task id), among `queued`.

    Only the tenant's own tasks are counted, so the answer says nothing about other tenants. Within the
    tenant, principals are served fairly, so a task of a principal with fewer runs may still pass it: the
    count is the tasks ahead in creation order, an upper bound of the wait in slots of its tenant.
    """
    mine = _order(task)
    return sum(1 for other in queued if other.owner.tenant == task.owner.tenant and _order(other) < mine)


def queued_message(tasks_ahead: int, held_by: RunningLimit | None = None) -> str:
    """The `statusMessage` of a task waiting for a slot, e.g. `queued: 3 of your tenant's tasks ahead`.

    Names only the caller's own tenant's tasks and budgets, never another tenant's.

    Args:
        tasks_ahead: `ahead(...)`, or a store's count of the same, up to `AHEAD_COUNTED_MAX`.
        held_by: the caller's own running budget it waits for, when that is what holds it.
    """
    if tasks_ahead == 0:
        text = f"{QUEUED_PREFIX}next in line for a slot"
    elif tasks_ahead >= AHEAD_COUNTED_MAX:
        text = f"{QUEUED_PREFIX}{AHEAD_COUNTED_MAX} or more of your tenant's tasks ahead"
    else:
        text = f"{QUEUED_PREFIX}{tasks_ahead} of your tenant's tasks ahead"
    if held_by == "max_running_per_tenant":
        text += "; your tenant is at its limit of running tasks (max_running_per_tenant)"
    elif held_by == "max_running_per_principal":
        text += "; you are at your limit of running tasks (max_running_per_principal)"
    return text
