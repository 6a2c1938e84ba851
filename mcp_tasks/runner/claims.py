"""`Claimer`: finds runnable tasks and takes their worker lease, applying the restart rules.

A runnable task is unfinished with no live lease. Claiming it is one compare-and-swap (`transitions.claim`:
lease, attempt + 1, TTL keep-alive). Before that: a run whose process outlived its runner is adopted
(`adoption`), or stopped; a task whose caller is gone, or that was cancelled, is settled without running;
a task whose tool was removed fails; a task whose previous holder is gone follows the restart rule
(`transitions.after_lost_run`: re-run an idempotent tool within `MAX_RUNS`, else "outcome unknown").

Which tasks are looked at (`runnable`) and a last check before a claim (`admit`) are passed in: the
embedded runner claims every task of its store; the operator's warm-task runner only warm tools' tasks
that no Job runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from mcp_tasks import aio
from mcp_tasks.observability.logs import task_context
from mcp_tasks.runner.adoption import Adoption
from mcp_tasks.runner.context import RunContext
from mcp_tasks.runner.supervision import Supervisor
from mcp_tasks.tasks import transitions
from mcp_tasks.tasks.errors import IllegalTransition, StoreUnavailable, TaskNotFound, VersionConflict
from mcp_tasks.tasks.record import TaskRecord

logger = logging.getLogger("mcp_tasks.runner")

Runnable = Callable[[int], Awaitable[list[TaskRecord]]]
"""Up to `capacity` tasks to try to claim now, oldest first."""
Admit = Callable[[TaskRecord], Awaitable[TaskRecord | None]]
"""A last check before a claim: the record to claim (possibly adjusted), or `None` to leave it."""


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

    async def loop(self) -> None:
        """Claim what is runnable, then wait for new tasks or freed capacity (at most `claim_poll_s`)."""
        ctx = self.ctx
        while True:
            try:
                await self.claim_runnable()
            except asyncio.CancelledError:
                raise
            except StoreUnavailable as exc:
                logger.warning("claim pass skipped: task store unavailable (%s)", exc)
            except Exception:
                logger.exception("claim pass failed; retrying")
            # New tasks wake us only while there is room to run them; freed capacity always does.
            if ctx.running_tasks < ctx.settings.max_concurrent_tasks:
                more = ctx.store.wait_for_new_tasks(ctx.settings.claim_poll_s)
            else:
                more = asyncio.sleep(ctx.settings.claim_poll_s)
            await aio.first_of(more, ctx.capacity_freed.wait())
            ctx.capacity_freed.clear()

    async def _all_runnable(self, capacity: int) -> list[TaskRecord]:
        return list(await self.ctx.store.list_runnable(self.ctx.clock(), capacity))

    async def claim_runnable(self) -> None:
        """One pass: claim up to the free capacity and start supervising each claimed task."""
        ctx = self.ctx
        capacity = ctx.settings.max_concurrent_tasks - ctx.running_tasks
        if capacity <= 0:
            return
        for record in await self._runnable(capacity):
            if record.task_id in ctx.supervisors:
                continue
            with task_context(record.task_id, record.tool):
                admitted = record if self._admit is None else await self._admit(record)
                claimed = None if admitted is None else await self.claim(admitted)
            if claimed is not None:
                execution = ctx.task_execution(claimed, f"{claimed.task_id}.{claimed.attempt}")
                self.supervisor.supervise(claimed, None, execution)

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
            if transitions.is_abandoned(record, now):  # a hidden task whose caller died with the last runner
                logger.warning("task %s: its caller is gone; cancelled instead of run", record.task_id)
                await ctx.write(record, transitions.cancel(record, now, transitions.ABANDONED_MESSAGE))
                return None
            if record.cancel_requested_at is not None:
                await ctx.write(record, transitions.cancel(record, now))
                return None
            if tool is None:
                message = f"Tool {record.tool!r} is no longer declared; the task cannot run"
                await ctx.write(record, transitions.failing(message, "ToolRemoved")(record, now))
                return None
            if record.lease is not None:  # a previous worker held it and is gone
                why = f"its worker {record.lease.holder} was lost"
                lost = transitions.after_lost_run(record, now, tool.execution.idempotent, why)
                if lost.status.is_terminal:
                    await ctx.write(record, lost)
                    logger.error("task %s lost its worker; failed (%s)", record.task_id, lost.status_message)
                    return None
                logger.warning("task %s lost its worker; re-running (idempotent tool)", record.task_id)
                return await ctx.write(record, transitions.claim(lost, ctx.holder, now, ctx.lease, retention_ms))
            return await ctx.write(record, transitions.claim(record, ctx.holder, now, ctx.lease, retention_ms))
        except (VersionConflict, TaskNotFound, IllegalTransition):
            return None  # another runner moved first
