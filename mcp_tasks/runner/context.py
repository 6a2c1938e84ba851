"""`RunContext`: what the parts of one executor share (claims, supervision, adoption, synchronous runs).

One object per executor (the embedded `LocalRunner`, the operator's `WarmTaskRunner`), built by it and
handed to each part; the parts hold no executor state of their own. Also the helpers every part needs
to write a task: `write` (a compare-and-swap reported to the write observers) and `finish_if_running`
(a terminal write retried while the store is unavailable).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Final

from mcp_tasks.runner.outcomes import KeptOutcomes
from mcp_tasks.runner.settings import RunnerSettings
from mcp_tasks.runner.tokens import WorkerTokens
from mcp_tasks.tasks.errors import StoreUnavailable, TaskNotFound
from mcp_tasks.tasks.interfaces import ArtifactStore, Clock, TaskStore, ToolCatalog, Writer, transact
from mcp_tasks.tasks.limits import LimitSettings
from mcp_tasks.tasks.owner import Owner
from mcp_tasks.tasks.record import TaskRecord
from mcp_tasks.worker.channel import Transition, WorkerChannel
from mcp_tasks.worker.executions import Execution, ExecutionTable
from mcp_tasks.worker.warm_auth import WarmCallSigner

logger = logging.getLogger("mcp_tasks.runner")

STORE_RETRY_FIRST_S: Final = 0.1
"""First wait before retrying a write the task store refused as unavailable, in seconds (then doubling)."""
STORE_RETRY_MAX_S: Final = 5.0
"""Longest wait between such retries, in seconds."""


@dataclass(eq=False)
class RunContext:
    """The state one executor's parts share.

    Attributes:
        store, catalog, artifacts, clock, settings: the executor's task store, tool catalog, artifact store,
            UTC clock and settings.
        holder: this executor's lease holder name (`host:pid:random`).
        tokens: derives and verifies the runs' worker tokens.
        signer: mints the credentials of warm calls (`worker.warm_auth`).
        runs_dir: where each run's stderr file lives (`<execution id>.stderr`).
        adoptable: whether runs can outlive this executor and be adopted (a persistent state folder).
        outcomes: where a stopping executor keeps the outcomes the task store refused, for the next start
            (`None`: no persistent state folder; they are lost and the restart rule decides).
        executions: the runs the worker API can find now.
        supervisors: task id → the asyncio task supervising its run.
        in_rounds: supervised synchronous runs parked for input rounds (not counted as task runs).
        limits: the running budgets and weights the claim path shares slots by (`tasks.fair_share`).
        inline_owners: principal → synchronous runs of this executor running now (they count against
            the same running budgets as task runs; a promoted run is counted by its hidden task's lease).
        capacity_freed: set when a supervisor ends (wakes the claim loop).
        closing: the executor is stopping (a synchronous run that asks for input is stopped, not handed over).
        base_url: the worker API's executions URL the tools call (`…/v1/executions`).
        port: the worker API's port (0 when it serves none of its own).
    """

    store: TaskStore
    catalog: ToolCatalog
    artifacts: ArtifactStore
    clock: Clock
    settings: RunnerSettings
    holder: str
    tokens: WorkerTokens
    signer: WarmCallSigner
    runs_dir: Path
    adoptable: bool = False
    outcomes: KeptOutcomes | None = None
    executions: ExecutionTable = field(default_factory=ExecutionTable)
    supervisors: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    in_rounds: set[str] = field(default_factory=set)
    limits: LimitSettings = field(default_factory=LimitSettings)
    inline_owners: Counter[Owner] = field(default_factory=Counter)
    capacity_freed: asyncio.Event = field(default_factory=asyncio.Event)
    closing: bool = False
    base_url: str = ""
    port: int = 0
    channel: WorkerChannel = field(init=False)
    """The worker API's operations (set by the executor once its synchronous runs exist: they promote)."""

    @property
    def lease(self) -> timedelta:
        """The worker lease's length."""
        return timedelta(seconds=self.settings.lease_duration_s)

    @property
    def running_tasks(self) -> int:
        """Task runs supervised now; synchronous runs parked for input rounds have their own bound."""
        return len(self.supervisors) - len(self.in_rounds)

    def task_execution(self, record: TaskRecord, execution_id: str) -> Execution:
        """The worker API's view of a run of `record` (its tool as declared now, its derived token)."""
        return Execution(
            tool=self.catalog.get_tool(record.tool),
            arguments=record.arguments,
            arguments_ref=record.arguments_ref,
            task_id=record.task_id,
            attempt=record.attempt,
            pre_input_responses=record.pre_input_responses,
            execution_id=execution_id,
            token=self.tokens.token_for(execution_id),
            owner=record.owner,  # whom its warm calls' credentials name (`worker.warm_auth.caller_of`)
        )

    async def write(self, updated: TaskRecord) -> TaskRecord:
        """`compare_and_swap(updated)` as the executor (the store tells its write observers).

        Raises:
            VersionConflict, TaskNotFound, StoreUnavailable: from the store.
        """
        return await self.store.compare_and_swap(updated, Writer.EXECUTOR)

    async def finish_if_running(self, task_id: str, change: Transition, attempt: int | None = None) -> None:
        """Apply `change` (a terminal transition) unless the task already ended; a task gone is left gone.

        Fenced: nothing is written when the task's lease names another executor, or when `attempt` (the
        run whose outcome this is) was superseded by a later run (`TaskRecord.superseded`). A run that lost
        its lease while paused never writes over the re-run's result.

        The outcome is known, so it is kept until the store can take it: a `StoreUnavailable` is retried
        with back-off (0.1 s doubling up to 5 s) until it succeeds or the caller is cancelled.
        """

        def apply(record: TaskRecord) -> tuple[TaskRecord, None]:
            if record.status.is_terminal:
                return record, None
            if record.superseded(attempt, self.holder):
                lease = record.lease
                logger.warning(
                    "task %s: this run's outcome is not recorded: the task is attempt %s, held by %s now",
                    task_id,
                    record.attempt,
                    lease.holder if lease is not None else "nobody",
                )
                return record, None
            return change(record, self.clock()), None

        backoff_s = STORE_RETRY_FIRST_S
        while True:
            try:
                with contextlib.suppress(TaskNotFound):
                    await transact(self.store, task_id, apply, Writer.EXECUTOR)
                return
            except StoreUnavailable as exc:
                logger.warning("task %s: cannot record the outcome yet (%s); retry in %.1fs", task_id, exc, backoff_s)
                await asyncio.sleep(backoff_s)
                backoff_s = min(backoff_s * 2, STORE_RETRY_MAX_S)

    async def stop_supervisors(self) -> None:
        """Stop every run this executor supervises (each applies the shutdown rule to its task) and wait
        for them, `shutdown_grace_s + 5` seconds at most per round; set `closing` first.
        """
        self.closing = True  # from now on a synchronous run that asks for input is stopped, not handed over
        for _ in range(3):  # a hand-over racing this shutdown adds a supervisor after the first snapshot
            supervisors = list(self.supervisors.values())
            if not supervisors:
                return
            for supervisor in supervisors:
                supervisor.cancel()
            _done, pending = await asyncio.wait(supervisors, timeout=self.settings.shutdown_grace_s + 5)
            for task in pending:
                logger.error("task supervisor %s did not stop in time", task.get_name())
