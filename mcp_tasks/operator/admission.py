"""`Admission`: which McpTasks the operator lets start now (a Job, or a warm call), by fair share.

Without a cap (`OperatorSettings.max_running_tasks`) and without running budgets (`limits` group) every task
starts at once, as before, and nothing here runs. With either, the leader runs one admission pass at a time
(`run`), woken by every McpTask, Job and pod event and at least every `RECHECK_S`:

- **running** is counted from what exists, never from memory: each task whose Job has not ended or whose
  pods still run (`Children`, the watch-fed copies), each warm call under a live lease (the McpTask cache),
  plus the tasks admitted by this pass's predecessors whose Job or lease does not exist yet. A restarted
  operator, or a new leader, counts the same from its fresh listings (`Reconciler.relist`).
- **queued** are the unfinished tasks that never ran, have no Job and no lease, and are not Kueue's
  (`operator.kueue`: Kueue admits those Jobs itself).
- `tasks.fair_share.pick` chooses which queued tasks take the free slots (cap minus running, or all of them
  without a cap, each within its tenant's and principal's budget); those are admitted and their reconcile
  (or the warm runner) is woken. The others get `tasks.fair_share.queued_message` as their `statusMessage`:
  their position among their own tenant's queued tasks (exact below `AHEAD_EXACT`, then rounded up, so a
  long queue rewrites each task's message a few dozen times, not once per slot) and the tenant's or
  principal's budget when that is what holds them. A task is woken only when its message would change,
  so each message is written once.

A re-run (a task that ran before and lost its Job or warm pod) is admitted without waiting: it held a slot.
Nothing here reads the API server: the pass costs one walk of the caches (decoded records are kept per
resourceVersion). A standby replica admits nothing (`verdict` holds every task); the leader's pass is the
one source of admissions, also for the warm runner that runs on every replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Protocol

from mcp_tasks.operator import kueue, observe
from mcp_tasks.operator.children import Children
from mcp_tasks.operator.decide import HELD
from mcp_tasks.operator.settings import OperatorSettings
from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.tasks import fair_share
from mcp_tasks.tasks.fair_share import Queued, Usage
from mcp_tasks.tasks.interfaces import Clock, ToolCatalog
from mcp_tasks.tasks.limits import LimitSettings
from mcp_tasks.tasks.owner import Owner
from mcp_tasks.tasks.record import TaskRecord
from mcp_tasks.tasks.tools import ToolSpec

logger = logging.getLogger("mcp_tasks.operator")

RECHECK_S: Final = 5.0
"""A pass at least this often while leading, in seconds: a warm call's lease that expires (its replica
died) frees a slot without any event."""
PASS_INTERVAL_S: Final = 0.05
"""Least time between two passes, in seconds: a burst of events costs one pass, not one each."""
PASS_SHARE: Final = 0.2
"""Most of a core the passes take: after a pass of `d` seconds the next waits at least `d / PASS_SHARE - d`
(a pass over 10,000 queued tasks took about 80 ms on the 2-core test machine: then at most 2.5 passes a second)."""
AHEAD_EXACT: Final = 20
"""Positions below this are told exactly; beyond, rounded up to the next 10, then 100 (an upper bound)."""
AHEAD_SHOWN_MAX: Final = 1000
"""The most tasks ahead a message names."""
NOBODY: Final = Owner("", "", "")
"""The owner a Job is counted under when its McpTask is gone from the cache (it still holds a slot)."""


@dataclass(slots=True)
class Census:
    """One count (`Admission._census`).

    Attributes:
        running: the owner of each run holding a slot (an owner repeats per run).
        admitted: tasks admitted earlier whose Job or lease does not exist yet (counted in `running`).
        queued: tasks waiting for admission.
        records: the records of `queued`, by task id.
    """

    running: list[Owner] = field(default_factory=list)
    admitted: dict[str, Owner] = field(default_factory=dict)
    queued: list[Queued] = field(default_factory=list)
    records: dict[str, TaskRecord] = field(default_factory=dict)


class TaskCache(Protocol):
    """What the admission reads of the McpTask store: its cache (`KubernetesTaskStore`), never the API server."""

    def unfinished_records(self) -> list[TaskRecord]:
        """Every unfinished task, decoded."""
        ...

    def owner_of(self, task_id: str) -> Owner | None:
        """The owner of a cached task, finished or not."""
        ...


def shown_ahead(ahead: int) -> int:
    """The position a queued task is told: exact below `AHEAD_EXACT`, else rounded up to a multiple of 10
    (below 100) or 100, at most `AHEAD_SHOWN_MAX`.
    """
    if ahead < AHEAD_EXACT:
        return ahead
    step = 10 if ahead < 100 else 100
    return min(AHEAD_SHOWN_MAX, math.ceil(ahead / step) * step)


def holds_slot(job: JsonObject | None, pods: list[JsonObject]) -> bool:
    """Whether a task's Job and pods hold a run slot: a Job that has not ended (not deleted either), or a
    pod that may still run (also one whose Job is gone, while it stops).
    """
    if any(observe.is_running(pod) for pod in pods):
        return True
    if job is None or job["metadata"].get("deletionTimestamp"):
        return False
    return observe.job_outcome(job) is None


class Admission:
    """The operator's admission of queued tasks (see the module docstring).

    Args:
        store: the McpTask store (its cache is read, never the API server).
        children: the copies of tool-run Jobs and pods.
        catalog: the McpTools (a task of a removed tool is not queued: it fails instead).
        settings: the operator's settings (`max_running_tasks`, the Kueue mapping).
        limits: the running budgets and weights per tenant.
        clock: UTC clock (lease expiry).
        wake_task: queues a task's reconcile (`WorkQueue.add`).
    """

    def __init__(
        self,
        store: TaskCache,
        children: Children,
        catalog: ToolCatalog,
        settings: OperatorSettings,
        limits: LimitSettings,
        clock: Clock,
        wake_task: Callable[[str], None],
    ) -> None:
        self.store = store
        self.children = children
        self.catalog = catalog
        self.settings = settings
        self.limits = limits
        self.clock = clock
        self.wake_task = wake_task
        self.wake_warm: Callable[[], None] = lambda: None
        """Wakes the warm-task runner's claim loop (set by the composition) when a warm task is admitted."""
        self.enabled = settings.max_running_tasks > 0 or limits.limits_running
        """Whether anything is held at all (a cap or a running budget is set)."""
        self.leading: asyncio.Event | None = None
        """Set while this replica leads (`run` takes it); `None`: it leads (a replica without an election)."""
        self._admitted: dict[str, Owner] = {}  # admitted, no Job or lease seen yet: counted as running
        self._waiting: dict[str, str] = {}  # task id -> the statusMessage it waits with
        self._wanted = asyncio.Event()

    def wake(self) -> None:
        """Ask for a pass (coalesced; it never blocks)."""
        self._wanted.set()

    def reset(self) -> None:
        """Forget this replica's admissions and messages (on becoming the leader: what runs is counted afresh
        from the new listings), and ask for a pass.
        """
        self._admitted.clear()
        self._waiting.clear()
        self.wake()

    def verdict(self, record: TaskRecord, tool: ToolSpec | None) -> str | None:
        """`None` when `record` may start now; else the `statusMessage` it waits with (`decide.HELD` before a
        pass placed it, or on a standby replica).
        """
        if not self.enabled or record.attempt > 0 or self._kueue_runs(record, tool):
            return None
        if record.task_id in self._admitted and (self.leading is None or self.leading.is_set()):
            return None
        self.wake()
        return self._waiting.get(record.task_id, HELD)

    def _kueue_runs(self, record: TaskRecord, tool: ToolSpec | None) -> bool:
        """Whether Kueue admits this task's Job (a Job-run tool mapped to a LocalQueue)."""
        if tool is None or tool.warm is not None:
            return False
        return self.settings.kueue_queue(tool.name, record.owner.tenant) is not None

    def _may_wait(self, record: TaskRecord) -> bool:
        """Whether an unfinished task with no Job and no live lease is one the admission places: it never
        ran, is not being cancelled, its tool can run it here, and Kueue does not admit it.
        """
        if record.attempt > 0 or record.cancel_requested_at is not None:
            return False
        tool = self.catalog.get_tool(record.tool)
        if tool is None or (tool.warm is None and not tool.manifest.container.image):
            return False
        return not self._kueue_runs(record, tool)

    async def run(self, leading: asyncio.Event) -> None:
        """Run passes while `leading` is set, until cancelled (returns at once when nothing is held)."""
        self.leading = leading
        if not self.enabled:
            return
        while True:
            await leading.wait()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(RECHECK_S):
                    await self._wanted.wait()
            self._wanted.clear()
            took_s = 0.0
            if leading.is_set():
                started = time.perf_counter()
                try:
                    self.assess()
                except Exception:  # a task guard: one bad pass must not end admission for good
                    logger.exception("admission pass failed; retrying")
                took_s = time.perf_counter() - started
            # coalesces bursts of events into one pass, and bounds the passes' share of a core
            await asyncio.sleep(max(PASS_INTERVAL_S, took_s / PASS_SHARE - took_s))

    def assess(self) -> list[str]:
        """One pass (see the module docstring): admit what fits, refresh the waiting messages, wake the tasks
        whose verdict or message changed; the ids admitted, in the order they got their slots.
        """
        census = self._census()
        running, queued, records = census.running, census.queued, census.records
        admitted = dict(census.admitted)
        usage = Usage.of(running)
        cap = self.settings.max_running_tasks
        slots = cap - len(running) if cap else len(queued)
        picked = fair_share.pick(queued, usage, self.limits, slots)
        warm = False
        for task in picked:
            admitted[task.task_id] = task.owner
            self.wake_task(task.task_id)
            tool = self.catalog.get_tool(records[task.task_id].tool)
            warm = warm or (tool is not None and tool.warm is not None)
        if warm:
            self.wake_warm()
        self._admitted = admitted
        after = usage.plus(Usage.of(task.owner for task in picked))
        self._waiting = self._messages(queued, set(admitted), after, records)
        return [task.task_id for task in picked]

    def tenant_counts(self) -> dict[str, tuple[int, int]]:
        """Tenant → (queued, running) tasks, as the admission counts them (`metrics.tenants_counted`)."""
        census = self._census()
        counts: dict[str, list[int]] = {}
        for task in census.queued:
            counts.setdefault(task.owner.tenant, [0, 0])[0] += 1
        for owner in census.running:
            counts.setdefault(owner.tenant, [0, 0])[1] += 1
        return {tenant: (queued, running) for tenant, (queued, running) in counts.items()}

    def _census(self) -> Census:
        """What runs and what waits now, from the copies and the cache (see the module docstring)."""
        now = self.clock()
        census = Census()
        for task_id in self.children.task_ids():
            job, pods = self.children.job(task_id), self.children.pods(task_id)
            if job is not None and kueue.queue_of(job) is not None:
                continue  # Kueue's quota holds it
            if holds_slot(job, pods):
                census.running.append(self.store.owner_of(task_id) or NOBODY)
        for record in self.store.unfinished_records():
            task_id = record.task_id
            if self.children.job(task_id) is not None or self.children.pods(task_id):
                continue  # counted above while it runs
            if record.lease is not None and record.lease.expires_at > now:
                census.running.append(record.owner)  # a warm call
                continue
            if not self._may_wait(record):
                continue
            if task_id in self._admitted:  # admitted, its Job or lease not seen yet
                census.admitted[task_id] = record.owner
                census.running.append(record.owner)
                continue
            census.queued.append(Queued(task_id, record.owner, record.created_at))
            census.records[task_id] = record
        return census

    def _messages(
        self, queued: list[Queued], picked: set[str], usage: Usage, records: dict[str, TaskRecord]
    ) -> dict[str, str]:
        """The `statusMessage` of every task still waiting; wakes those whose message would change."""
        lines: dict[str, list[Queued]] = {}
        for task in queued:
            if task.task_id not in picked:
                lines.setdefault(task.owner.tenant, []).append(task)
        messages: dict[str, str] = {}
        for line in lines.values():
            line.sort(key=lambda task: (task.created_at, task.task_id))  # `fair_share.ahead`'s order
            for position, task in enumerate(line):
                held_by = fair_share.over_budget(task.owner, usage, self.limits)
                message = fair_share.queued_message(shown_ahead(position), held_by)
                messages[task.task_id] = message
                if records[task.task_id].status_message != message:
                    self.wake_task(task.task_id)
        return messages
