"""`Claimer`: finds runnable tasks and takes their worker lease, applying the restart rules.

A runnable task is unfinished with no live lease. Claiming it is one compare-and-swap (`transitions.claim`:
lease, attempt + 1, TTL keep-alive). Before that: a run whose process outlived its runner is adopted
(`adoption`), or stopped; a task whose caller is gone, or that was cancelled, is settled without running;
a task whose tool was removed fails; a task whose previous holder is gone follows the restart rule
(`transitions.after_lost_run`: re-run an idempotent tool within `MAX_RUNS`, else "outcome unknown").

Which tasks are looked at (`runnable`) and a last check before a claim (`admit`) are passed in: the
embedded runner claims every task of its store; the operator's warm-task runner only warm tools' tasks
that no Job runs.

**Fair share** (`tasks.fair_share`, docs/fair-share.md). With the default `runnable` and a store that
answers from its indexes (`interfaces.FairQueue`, the SQLite store), a query pass takes, in this order:
tasks whose holder is gone (`lapsed`: they ran before, the restart rules apply to them first), then the
free slots' worth of queued tasks chosen by `fair_share.pick` from each waiting principal's oldest ones
(`queued_heads`), with the runs counted in the store (`running_usage`: every holder's live leases, so the
counts hold across restarts and processes sharing the file) plus this process's synchronous calls. Two
indexed reads per pass (`claim_view`, then the chosen records; a third when leases lapsed), O(running +
principals waiting x free slots), never a walk of the queue.
`statusMessage` of a queued task is computed on read by the gateway; the claim path writes nothing to the
tasks it leaves.

A pass claims in a batch: the fresh tasks of a pass are claimed concurrently, so a store that groups
concurrent writes into one commit (the SQLite store) takes them with one fsync. With the default
`runnable`, a pass claims the records the store hands over (`RunnableFeed.take_runnable`: tasks this
process created or reset for a re-run) instead of querying for them; the query still runs at start, on
every poll (`claim_poll_s`: other processes' tasks), after tasks may have been left behind (capacity
was short, a claim lost a race, a pass failed), and when the hand-over is incomplete.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Protocol, runtime_checkable

from mcp_tasks import aio
from mcp_tasks.observability.logs import task_context
from mcp_tasks.runner.adoption import Adoption
from mcp_tasks.runner.context import RunContext
from mcp_tasks.runner.supervision import Supervisor, execution_id_of
from mcp_tasks.tasks import fair_share, transitions
from mcp_tasks.tasks.errors import IllegalTransition, StoreUnavailable, TaskNotFound, VersionConflict
from mcp_tasks.tasks.interfaces import FairQueue
from mcp_tasks.tasks.record import TaskRecord

logger = logging.getLogger("mcp_tasks.runner")

Runnable = Callable[[int], Awaitable[list[TaskRecord]]]
"""Up to `capacity` tasks to try to claim now, oldest first."""
Admit = Callable[[TaskRecord], Awaitable[TaskRecord | None]]
"""A last check before a claim: the record to claim (possibly adjusted), or `None` to leave it."""


@runtime_checkable
class RunnableFeed(Protocol):
    """A task store that hands over the tasks this process made runnable (`SqliteTaskStore.take_runnable`)."""

    def take_runnable(self) -> list[TaskRecord] | None:
        """The records written runnable since the last call, as committed, oldest first; `None` if some
        were not kept.
        """
        ...


class Claimer:
    """The claim loop of one executor (see the module docstring).

    Args:
        ctx: the executor's shared state.
        supervisor: runs what is claimed.
        adoption: adopts runs that outlived their runner.
        runnable: which tasks to look at; default every runnable task of `ctx.store`.
        admit: a last check before each claim; default none.
    """

    def __init__(
        self,
        ctx: RunContext,
        supervisor: Supervisor,
        adoption: Adoption,
        runnable: Runnable | None = None,
        admit: Admit | None = None,
    ) -> None:
        self.ctx = ctx
        self.supervisor = supervisor
        self.adoption = adoption
        self._runnable = runnable or self._all_runnable
        self._admit = admit
        store = ctx.store
        self._created = store if runnable is None and isinstance(store, RunnableFeed) else None
        self._fair = store if runnable is None and isinstance(store, FairQueue) else None
        self._query = True  # the next pass must query: at start, tasks may be waiting from before

    async def loop(self) -> None:
        """Claim what is runnable, then wait for new tasks or freed capacity (at most `claim_poll_s`)."""
        ctx = self.ctx
        loop = asyncio.get_running_loop()
        while True:
            try:
                await self.claim_runnable()
            except asyncio.CancelledError:
                raise
            except StoreUnavailable as exc:
                self._query = True
                logger.warning("claim pass skipped: task store unavailable (%s)", exc)
            except Exception:
                self._query = True
                logger.exception("claim pass failed; retrying")
            # New tasks wake us only while there is room to run them; freed capacity always does.
            waited_from = loop.time()
            if ctx.running_tasks < ctx.settings.max_concurrent_tasks:
                more = ctx.store.wait_for_new_tasks(ctx.settings.claim_poll_s)
            else:
                more = asyncio.sleep(ctx.settings.claim_poll_s)
            await aio.first_of(more, ctx.capacity_freed.wait())
            ctx.capacity_freed.clear()
            if loop.time() - waited_from >= ctx.settings.claim_poll_s:
                self._query = True  # a poll: other processes' tasks are found by the query

    async def _all_runnable(self, capacity: int) -> list[TaskRecord]:
        return list(await self.ctx.store.list_runnable(self.ctx.clock(), capacity))

    async def claim_runnable(self) -> None:
        """One pass: claim up to the free capacity and start supervising each claimed task.

        Fresh tasks (never run, not cancelled) are claimed concurrently, one batch; the others one by one,
        since the restart rules may adopt or stop a process first.
        """
        ctx = self.ctx
        capacity = ctx.settings.max_concurrent_tasks - ctx.running_tasks
        if capacity <= 0:
            await self._settle_cancelled()
            return
        records = self._handed_over(capacity)
        if records is None and self._fair is not None:
            records, self._query = await self._fair_share(self._fair, capacity)
        elif records is None:
            records = await self._runnable(capacity)
            self._query = len(records) >= capacity  # there may be more than there was room for
        records = [record for record in records if record.task_id not in ctx.supervisors]
        fresh = [record for record in records if record.lease is None and record.cancel_requested_at is None]
        claimed = await asyncio.gather(*(self._claim_one(record) for record in fresh))
        if not all(claimed):
            self._query = True  # a claim lost a race (or was not admitted): look again
        for record in records:
            if record.lease is not None or record.cancel_requested_at is not None:
                await self._claim_one(record)

    async def _fair_share(self, store: FairQueue, capacity: int) -> tuple[list[TaskRecord], bool]:
        """Up to `capacity` tasks to claim, by the fair-share rule (module docstring), and whether more may
        be waiting (then the next pass queries again).
        """
        ctx = self.ctx
        now = ctx.clock()
        view = await store.claim_view(now, capacity)
        lapsed = await store.lapsed(now, capacity) if view.lapsed else []
        slots = capacity - len(lapsed)
        if slots <= 0:
            return lapsed, True
        heads = view.queued
        if not heads:
            return lapsed, view.lapsed > len(lapsed)
        usage = fair_share.Usage.counted(view.running)
        if ctx.inline_owners:
            usage = usage.plus(fair_share.Usage.of(ctx.inline_owners.elements()))
        picked = fair_share.pick(heads, usage, ctx.limits, slots)
        records = await store.queued_records([task.task_id for task in picked])
        per_principal = Counter(task.owner for task in heads)
        more = len(heads) > len(picked) or len(records) < len(picked) or max(per_principal.values()) >= slots
        more = more or view.lapsed > len(lapsed)
        return lapsed + records, more  # a principal that filled its `slots` heads may have more waiting

    async def _settle_cancelled(self) -> None:
        """With no free slot: settle the handed-over tasks cancelled before they ever ran (they need no slot),
        so a cancelled queued task does not wait for one; anything else handed over is left to the next
        query.
        """
        if self._created is None:
            return
        handed = self._created.take_runnable()
        if not handed and handed is not None:
            return
        self._query = True  # the rest of the hand-over is found by the next query
        cancelled = {
            record.task_id: record
            for record in handed or ()
            if record.cancel_requested_at is not None and record.lease is None and not record.status.is_terminal
        }
        for record in cancelled.values():
            if record.task_id not in self.ctx.supervisors:
                await self._claim_one(record)

    def _handed_over(self, capacity: int) -> list[TaskRecord] | None:
        """The tasks this process made runnable since the last pass (the latest record of each), when they
        are all there is to claim and all fit; else `None` (query the store). With running budgets set they
        are never handed over: a budget is counted in the store.
        """
        if self._created is None:
            return None
        handed = self._created.take_runnable()
        latest = {record.task_id: record for record in handed or ()}
        if self._query or handed is None or len(latest) > capacity or self.ctx.limits.limits_running:
            self._query = True
            return None
        now = self.ctx.clock()
        return [
            record
            for record in latest.values()
            if not record.status.is_terminal and (record.lease is None or record.lease.expires_at <= now)
        ]

    async def _claim_one(self, record: TaskRecord) -> bool:
        """Admit and claim `record`, then supervise it; False when it was left (not admitted, or taken first)."""
        ctx = self.ctx
        with task_context(record.task_id, record.tool):
            admitted = record if self._admit is None else await self._admit(record)
            claimed = None if admitted is None else await self.claim(admitted)
        if claimed is None:
            return False
        execution = ctx.task_execution(claimed, execution_id_of(claimed))
        self.supervisor.supervise(claimed, None, execution)
        return True

    async def claim(self, record: TaskRecord) -> TaskRecord | None:
        """Take the lease, applying the restart rules; return the record to run, or None.

        A run whose process outlived its runner is adopted (supervised by `adoption`, not started again)
        when it can be; otherwise that process is stopped first, then the rules apply as for a lost worker.
        """
        ctx = self.ctx
        now = ctx.clock()
        tool = ctx.catalog.get_tool(record.tool)
        retention_ms = tool.execution.ttl_ms if tool else record.ttl_ms
        try:
            running = None if record.lease is None else record.lease.process
            if (
                running is not None
                and tool is not None
                and record.cancel_requested_at is None
                and not transitions.is_abandoned(record, now)
                and await self.adoption.adopt(record, tool, running) is not None
            ):
                return None  # supervised by adoption
            await self.adoption.stop_orphan(record, tool)
            if await self.adoption.record_kept(record):
                return None  # its tool had finished; the outcome it posted is recorded now
            if transitions.is_abandoned(record, now):  # a hidden task whose caller died with the last runner
                logger.warning("task %s: its caller is gone; cancelled instead of run", record.task_id)
                await ctx.write(transitions.cancel(record, now, transitions.ABANDONED_MESSAGE))
                return None
            if record.cancel_requested_at is not None:
                await ctx.write(transitions.cancel(record, now))
                return None
            if tool is None:
                message = f"Tool {record.tool!r} is no longer declared; the task cannot run"
                await ctx.write(transitions.failing(message, "ToolRemoved")(record, now))
                return None
            if record.lease is not None:  # a previous worker held it and is gone
                why = f"its worker {record.lease.holder} was lost"
                lost = transitions.after_lost_run(record, now, tool.execution.idempotent, why)
                if lost.status.is_terminal:
                    await ctx.write(lost)
                    logger.error("task %s lost its worker; failed (%s)", record.task_id, lost.status_message)
                    return None
                logger.warning("task %s lost its worker; re-running (idempotent tool)", record.task_id)
                return await self.supervisor.claim(
                    transitions.claim(lost, ctx.holder, now, ctx.lease, retention_ms), tool
                )
            return await self.supervisor.claim(
                transitions.claim(record, ctx.holder, now, ctx.lease, retention_ms), tool
            )
        except (VersionConflict, TaskNotFound, IllegalTransition):
            return None  # another runner moved first
