"""`Supervisor`: start, watch and conclude one task's run under the executor's lease.

For a claimed (or adopted, or promoted) task it starts the run (a process, or a call on a warm worker),
records the process in the lease so a restarted runner can adopt it, renews the lease while it runs, asks
`tasks.deadlines.next_stop` whether it must stop (cancel, caller gone, input wait, run time: the rule every
executor shares), and writes the task's outcome. Whatever goes wrong, the task gets an outcome and the
executor's capacity frees. Never claims a task (`claims`) nor serves the worker API.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Final, Literal

from mcp_tasks import aio
from mcp_tasks.observability import metrics, tracing
from mcp_tasks.observability.logs import bind_task
from mcp_tasks.runner import identity
from mcp_tasks.runner.context import STORE_RETRY_FIRST_S, RunContext
from mcp_tasks.runner.process import ToolProcess
from mcp_tasks.runner.runs import Runs, ToolRun, cannot_start
from mcp_tasks.runner.warm_pool import WarmBusy
from mcp_tasks.runner.warm_runs import WarmRun
from mcp_tasks.tasks import deadlines, results, transitions
from mcp_tasks.tasks.errors import IllegalTransition, LeaseLost, StoreUnavailable, TaskNotFound, VersionConflict
from mcp_tasks.tasks.interfaces import Writer, transact
from mcp_tasks.tasks.record import LeaseProcess, TaskRecord
from mcp_tasks.tasks.tools import ToolSpec
from mcp_tasks.worker.channel import recording
from mcp_tasks.worker.executions import Execution, Finished
from mcp_tasks.worker.tls import endpoint_of

logger = logging.getLogger("mcp_tasks.runner")

STOPPED_OUTCOME_UNKNOWN: Final = (
    "The server was stopped while this task ran and the tool is not declared idempotent, so the outcome is "
    "unknown; check the tool's side effects before calling it again"
)

LostWorkerRule = Callable[[TaskRecord, ToolSpec, ToolRun, datetime], TaskRecord]
"""What becomes of a task whose warm worker died mid-call: `(record, tool, run, now) → updated record`."""

Ending = deadlines.Stop | Literal["exited", "finished"]
"""How watching a run ended: a stop it must obey, its process exited, or the task finished meanwhile."""


def execution_id_of(claimed: TaskRecord) -> str:
    """The execution id of the run a claim starts: `<task id>.<attempt>` (the claimed record's attempt)."""
    return f"{claimed.task_id}.{claimed.attempt}"


def _endpoint(process: ToolRun) -> str | None:
    """`host:port` of the warm worker a run's call went to; `None` for a process of its own."""
    return process.warm_endpoint if isinstance(process, WarmRun) else None


def lost_worker_rule(record: TaskRecord, tool: ToolSpec, process: ToolRun, now: datetime) -> TaskRecord:
    """The restart rule for a lost warm worker (`transitions.after_lost_run`): a call that never reached a
    worker, or an idempotent tool's, runs again, within `transitions.MAX_RUNS` runs in all.
    """
    why = process.stderr_tail()
    updated = transitions.after_lost_run(record, now, tool.execution.idempotent or not process.delivered, why)
    if updated.status.is_terminal:
        logger.error("task %s lost its warm worker (%s); %s", record.task_id, why, updated.status_message)
    else:
        logger.warning("task %s lost its warm worker (%s); re-running", record.task_id, why)
    return updated


class Supervisor:
    """Supervises the runs of one executor (see the module docstring).

    Args:
        ctx: the executor's shared state.
        runs: makes the runs.
        after_lost_worker: the restart rule for a warm worker lost mid-call (the operator's keeps the
            re-run its own).
    """

    def __init__(self, ctx: RunContext, runs: Runs, after_lost_worker: LostWorkerRule = lost_worker_rule) -> None:
        self.ctx = ctx
        self.runs = runs
        self.after_lost_worker = after_lost_worker
        self._named: dict[str, LeaseProcess] = {}
        """Task id → the process its claim named in its lease (`claim`), until its run starts."""

    async def claim(self, claiming: TaskRecord, tool: ToolSpec) -> TaskRecord:
        """Write `claiming` (`transitions.claim`'s record, `tool`'s task); the record as claimed.

        For an adoptable run of a warm tool with a ready local worker, the claim's lease also names the run's
        process: that worker (the one `WarmPool.acquire` gives the next slot on) and the execution id, what
        `_record_process` writes once a call is sent. When the call then goes to that worker, as it does
        unless the pool changed meanwhile, that write is not needed: one write fewer per task, the call
        is sent only once the store names it (a restarted runner can re-attach to it from its first moment
        on), and the result never waits for that write. Otherwise the process is recorded once the run
        starts, as without a named worker.

        Raises:
            VersionConflict, TaskNotFound, StoreUnavailable: from the store.
            IllegalTransition: the task finished meanwhile.
        """
        worker = self.runs.next_worker(tool) if self.ctx.adoptable else None
        execution_id = execution_id_of(claiming)
        running = None if worker is None else self._lease_process(worker.process.pid, worker.base_url, execution_id)
        if running is None:
            return await self.ctx.write(claiming)
        claimed = await self.ctx.write(transitions.record_process(claiming, self.ctx.holder, running))
        self._named[claimed.task_id] = running
        return claimed

    def spawn(self, task_id: str, tool: ToolSpec, run: Awaitable[None], in_rounds: bool = False) -> None:
        """Supervise `run` for `task_id` in an asyncio task the executor owns (`ctx.supervisors`)."""
        if in_rounds:
            self.ctx.in_rounds.add(task_id)
        self.ctx.supervisors[task_id] = asyncio.create_task(self._guarded(task_id, tool, run), name=f"task-{task_id}")

    def supervise(self, record: TaskRecord, adopted: LeaseProcess | None, execution: Execution) -> None:
        """Run (or, with `adopted`, follow the live process of) the claimed task `record`."""
        tool = self.ctx.catalog.get_tool(record.tool)
        assert tool is not None  # claims and adoption checked
        self.spawn(record.task_id, tool, self._run_task(record, tool, execution, adopted))

    async def _guarded(self, task_id: str, tool: ToolSpec, run: Awaitable[None]) -> None:
        """Run one task's supervision `run`; whatever goes wrong, the task gets an outcome and capacity frees."""
        bind_task(task_id, tool.name)  # this asyncio task's log lines are about this task
        try:
            await run
        except asyncio.CancelledError:
            raise
        except LeaseLost:
            logger.warning("task %s: lease lost; another worker owns it now", task_id)
        except Exception:
            logger.exception("task %s: supervisor failed", task_id)
            failed = transitions.failing("Internal error in the runner", "InternalError")
            await self.ctx.finish_if_running(task_id, failed)
        finally:
            self.ctx.supervisors.pop(task_id, None)
            self.ctx.in_rounds.discard(task_id)
            self.ctx.capacity_freed.set()

    async def _run_task(
        self, record: TaskRecord, tool: ToolSpec, execution: Execution, adopted: LeaseProcess | None
    ) -> None:
        attributes = {"mcp.tool": tool.name, "mcp.task.id": record.task_id, "mcp.task.attempt": record.attempt}
        with tracing.span("mcp.task.run", record.traceparent, attributes) as traceparent:
            execution.traceparent = traceparent
            await self._run_process(record, tool, execution, adopted)

    async def _run_process(
        self, record: TaskRecord, tool: ToolSpec, execution: Execution, adopted: LeaseProcess | None
    ) -> None:
        process: ToolRun
        named = self._named.pop(record.task_id, None)  # the process the claim named, if it did
        if adopted is not None:
            process = self.runs.adopt(tool, adopted, execution)
        else:
            process = self.runs.new_run(tool, execution, self.ctx.settings.lease_duration_s / 3)
        self.ctx.executions.add(execution)
        try:
            if adopted is None:
                try:
                    if not await self._start(record.task_id, tool, process):
                        return  # cancelled (or finished) while it waited for a warm worker
                    metrics.RUNS_STARTED.labels(tool.name).inc()
                except OSError as exc:
                    message = cannot_start(tool, exc)
                    await self.ctx.finish_if_running(
                        record.task_id, transitions.failing(message, "CannotStart"), execution.attempt
                    )
                    return
                where = "on a warm worker" if isinstance(process, WarmRun) else f"pid {process.pid}"
                logger.info("task %s: started %s (%s, attempt %s)", record.task_id, tool.name, where, record.attempt)
                if named is None or (process.pid, _endpoint(process)) != (named.pid, named.warm_endpoint):
                    await self.recorded(record.task_id, tool, process, execution)
            await self.follow(record.task_id, tool, process, execution)
        finally:
            self.ctx.executions.remove(execution)
            if not execution.handed_over:  # the next start reads a handed-over run's stderr tail
                process.discard_log()

    async def follow(
        self,
        task_id: str,
        tool: ToolSpec,
        process: ToolRun,
        execution: Execution,
        exited: asyncio.Task[int | None] | None = None,
    ) -> None:
        """Watch a started run until it ends, then record how (`_watch`, `_conclude`).

        A cancelled supervisor (the executor stopping) stops the run and applies the shutdown rule.
        """
        if exited is None:
            exited = asyncio.create_task(process.wait(), name=f"wait-{task_id}")
        try:
            ending = await self._watch(task_id, tool, process, exited)
            await self._conclude(task_id, tool, process, execution, ending)
        except asyncio.CancelledError:
            await self._stop_on_shutdown(task_id, tool, process, execution)
            raise
        except BaseException:
            await asyncio.shield(process.stop(tool.execution.cancel_grace_seconds))
            raise
        finally:
            if not exited.done():
                exited.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await exited

    async def _start(self, task_id: str, tool: ToolSpec, process: ToolRun) -> bool:
        """Start a task's run; False when it was cancelled or finished while it waited for a warm slot.

        A warm run waits for a free worker a third of a lease at a time; in between, the lease is renewed
        and `next_stop` decides (cancel, caller gone, or no worker took it within `maxRunTimeSeconds`:
        `StartTimeout`).

        Raises:
            OSError: the run cannot start (the command, or warm workers that fail to start).
        """
        limit_s = tool.execution.max_run_time_seconds
        waiting = deadlines.RunFacts(started_at=None, start_deadline=self.ctx.clock() + timedelta(seconds=limit_s))
        while True:
            try:
                await process.start()
                return True
            except WarmBusy:
                record = await self.ctx.store.get(task_id)
                now = self.ctx.clock()
                if record.status.is_terminal:
                    return False
                stop = deadlines.next_stop(record, now, tool.execution, waiting)
                if isinstance(stop, deadlines.Stop):
                    not_started = f"No warm worker of tool {tool.name!r} took the task within {limit_s:g}s"
                    ending = deadlines.verdict(stop, record, tool.execution, not_started)
                    await self.ctx.finish_if_running(task_id, ending.apply)
                    return False
                renewed = transitions.renew(record, self.ctx.holder, now, self.ctx.lease, tool.execution.ttl_ms)
                with contextlib.suppress(VersionConflict):  # the client wrote meanwhile: read again
                    await self.ctx.write(renewed)

    async def recorded(self, task_id: str, tool: ToolSpec, process: ToolRun, execution: Execution) -> None:
        """`_record_process`, and a server stopping meanwhile stops the run it started (as `follow` would)."""
        try:
            await self._record_process(task_id, process, execution)
        except asyncio.CancelledError:
            await self._stop_on_shutdown(task_id, tool, process, execution)
            raise

    async def _record_process(self, task_id: str, process: ToolRun, execution: Execution) -> None:
        """Write which process runs the attempt into the lease, so a restarted runner can adopt it."""
        if not self.ctx.adoptable:
            return  # no state folder: this run cannot be adopted
        running = self._lease_process(process.pid, _endpoint(process), execution.execution_id)
        if running is None:
            return  # no identity (no /proc): this run cannot be adopted
        try:
            await transact(
                self.ctx.store,
                task_id,
                lambda r: (transitions.record_process(r, self.ctx.holder, running), None),
                Writer.EXECUTOR,
            )
        except StoreUnavailable as exc:
            logger.warning("task %s: could not record its process (%s); it cannot be adopted", task_id, exc)

    def _lease_process(self, pid: int | None, endpoint: str | None, execution_id: str) -> LeaseProcess | None:
        """What a lease names to adopt run `execution_id` by: local process `pid` (`None`: a call on a pod)
        and, for a warm call, its worker's `endpoint` (`http(s)://host:port` or `host:port`); `None` when it
        cannot be adopted (no process identity, no `/proc`).
        """
        endpoint = None if endpoint is None else endpoint_of(endpoint)
        known = "" if pid is None else identity.of(pid)
        if known is None or (pid is None and endpoint is None):
            return None
        return LeaseProcess(
            pid=pid or 0,  # 0: a call on a pod, no local process
            identity=known,
            execution_id=execution_id,
            worker_port=self.ctx.port,
            warm_endpoint=endpoint,
        )

    async def _watch(self, task_id: str, tool: ToolSpec, process: ToolRun, exited: asyncio.Task[int | None]) -> Ending:
        """Renew the lease until the run exits, the task finishes, or `next_stop` says it must stop.

        While the task store cannot answer (`StoreUnavailable`: disk full, read-only file system) the tool
        keeps running: reads and renewals are retried with back-off (0.1 s doubling up to a third of the
        lease), since nothing else can take the lease over a store that cannot write either.
        """
        ctx = self.ctx
        started = ctx.clock()
        run: deadlines.RunFacts | None = None  # once read: the task's input wait when this run started
        renew_every_s = ctx.settings.lease_duration_s / 3
        next_renew = started + timedelta(seconds=renew_every_s)
        backoff_s = STORE_RETRY_FIRST_S
        while True:
            now = ctx.clock()
            if exited.done():
                return "exited"
            process.trim_log()
            try:
                record = await ctx.store.get(task_id)
                if record.status.is_terminal:
                    return "finished"
                if run is None:
                    run = deadlines.RunFacts(started_at=started, waited_before_ms=record.input_wait_ms)
                stop = deadlines.next_stop(record, now, tool.execution, run)
                if isinstance(stop, deadlines.Stop):
                    return stop
                if now >= next_renew:
                    if await self._renew(task_id, tool):
                        return "finished"
                    next_renew = now + timedelta(seconds=renew_every_s)
            except StoreUnavailable as exc:
                logger.warning(
                    "task %s: task store unavailable (%s); the tool keeps running, retrying in %.1fs",
                    task_id,
                    exc,
                    backoff_s,
                )
                await aio.first_of(asyncio.sleep(backoff_s), asyncio.shield(exited))
                backoff_s = min(backoff_s * 2, renew_every_s)
                continue
            backoff_s = STORE_RETRY_FIRST_S
            wake = next_renew if stop is None else min(stop, next_renew)
            until_s = max((wake - now).total_seconds() + 0.01, 0.01)
            await aio.first_of(ctx.store.wait_for_change(until_s, task_id), asyncio.shield(exited))

    async def _renew(self, task_id: str, tool: ToolSpec) -> bool:
        """Renew the lease (and the TTL keep-alive); True when the task finished just before.

        Raises:
            LeaseLost: another executor holds the task now.
        """
        ctx = self.ctx
        try:
            await transact(
                ctx.store,
                task_id,
                lambda r: (transitions.renew(r, ctx.holder, ctx.clock(), ctx.lease, tool.execution.ttl_ms), None),
                Writer.EXECUTOR,
            )
        except LeaseLost:
            if (await ctx.store.get(task_id)).status.is_terminal:
                return True  # the result landed between our read and the renewal
            raise
        return False

    async def _conclude(
        self, task_id: str, tool: ToolSpec, process: ToolRun, execution: Execution, ending: Ending
    ) -> None:
        grace = tool.execution.cancel_grace_seconds
        if isinstance(ending, deadlines.Stop):
            await process.stop(grace)
            limits = tool.execution
            if ending in (deadlines.Stop.CANCEL, deadlines.Stop.ABANDONED):
                logger.info("task %s: %s; tool stopped", task_id, ending)
            else:
                logger.warning("task %s: %s; tool stopped", task_id, ending)
            await self.ctx.finish_if_running(
                task_id, lambda r, now: deadlines.verdict(ending, r, limits).apply(r, now), execution.attempt
            )
            return
        if ending == "finished":
            # The result is recorded; give the tool its grace period to exit by itself.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(grace, 1.0)):
                    await process.wait()
            await process.stop(grace)
            return
        code = await process.wait()
        if execution.outcome.done() and isinstance(execution.outcome.result(), Finished):
            return  # it posted its result (a promoted run's outcome says only that it asked for input)
        if execution.unrecorded is not None:  # it posted its outcome while the store could not take it
            await self.ctx.finish_if_running(task_id, recording(execution.unrecorded), execution.attempt)
            return
        if process.worker_lost:  # the warm worker died mid-call: the restart rules, as for a lost lease
            await self.ctx.finish_if_running(
                task_id, lambda r, now: self.after_lost_worker(r, tool, process, now), execution.attempt
            )
            return
        result = results.exited_without_result(tool.name, code, process.stderr_tail())
        logger.warning("task %s: tool exited with code %s without a result", task_id, code)
        await self.ctx.finish_if_running(
            task_id, lambda r, now: transitions.complete(r, result, now), execution.attempt
        )

    async def _hands_over(self, task_id: str, process: ToolRun, execution: Execution) -> bool:
        """True when a stopping executor leaves this run to the next start (`RunnerSettings.stop_hands_over`):
        a live local process whose lease, held by this executor, names it for adoption, with no outcome
        posted and unrecorded. The task is left exactly as a crash would leave it.
        """
        if not (self.ctx.settings.stop_hands_over and self.ctx.adoptable and isinstance(process, ToolProcess)):
            return False
        pid = process.pid
        if pid is None or execution.unrecorded is not None:
            return False
        try:
            record = await self.ctx.store.get(task_id)
        except (TaskNotFound, StoreUnavailable):
            return False
        lease = record.lease
        running = None if lease is None else lease.process
        return (
            not record.status.is_terminal
            and lease is not None
            and lease.holder == self.ctx.holder
            and running is not None
            and running.execution_id == execution.execution_id
            and running.pid == pid
            and identity.is_alive(pid, running.identity)
        )

    async def _stop_on_shutdown(self, task_id: str, tool: ToolSpec, process: ToolRun, execution: Execution) -> None:
        """The executor is stopping: hand the run to the next start (`_hands_over`), or stop the tool and
        decide its task now: the outcome the tool posted while the store could not take it
        (`execution.unrecorded`), else the restart rule.

        A store that still cannot write leaves the task unfinished, its lease naming the run: the next
        start decides it, from the outcome kept in `ctx.outcomes` when there is one (docs/design.md §7).
        """
        if await asyncio.shield(self._hands_over(task_id, process, execution)):
            execution.handed_over = True
            logger.warning(
                "task %s: %s (pid %s) left running for the next start to adopt (the server is stopping)",
                task_id,
                tool.name,
                process.pid,
            )
            return
        await asyncio.shield(process.stop(self.ctx.settings.shutdown_grace_s))
        idempotent = tool.execution.idempotent
        posted = execution.unrecorded

        def apply(record: TaskRecord) -> tuple[TaskRecord, bool]:
            if record.status.is_terminal:
                return record, False  # it finished first: nothing was lost
            if record.superseded(execution.attempt, self.ctx.holder):
                return record, False  # another executor runs it now: not ours to decide
            if posted is not None:
                return recording(posted)(record, self.ctx.clock()), False
            why = "the server stopped"
            updated = transitions.after_lost_run(record, self.ctx.clock(), idempotent, why, STOPPED_OUTCOME_UNKNOWN)
            return updated, True

        try:
            with contextlib.suppress(TaskNotFound, VersionConflict, IllegalTransition):
                _record, interrupted = await asyncio.shield(transact(self.ctx.store, task_id, apply, Writer.EXECUTOR))
                if interrupted:
                    after = "re-run at the next start (idempotent)" if idempotent else "failed (outcome unknown)"
                    logger.warning("task %s: %s stopped by the server's shutdown; %s", task_id, tool.name, after)
        except StoreUnavailable as exc:
            await asyncio.shield(self._keep_for_next_start(task_id, execution, exc))

    async def _keep_for_next_start(self, task_id: str, execution: Execution, exc: StoreUnavailable) -> None:
        """The store cannot write at shutdown: keep the run's posted outcome (if any) for the next start."""
        posted, kept = execution.unrecorded, self.ctx.outcomes
        if posted is None or kept is None:
            logger.warning("task %s: the task store cannot write (%s); the next start decides the task", task_id, exc)
            return
        try:
            await asyncio.to_thread(kept.save, task_id, execution.attempt, posted)
        except OSError as error:
            logger.error("task %s: neither the task store (%s) nor %s can keep its outcome", task_id, exc, error)
            return
        logger.warning(
            "task %s: the task store cannot write (%s); the outcome its tool posted is kept for the next start",
            task_id,
            exc,
        )
