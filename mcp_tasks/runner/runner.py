"""`LocalRunner`: the embedded executor. Claims tasks with leases, runs each as a local process.

For every runnable task (non-terminal, no live lease) it takes the worker lease (compare-and-swap),
starts the tool's command, renews the lease while the process runs, and enforces the tool's
maximum run time. Cancellation is cooperative: `tasks/cancel` only records the request; the runner
sees it, sends SIGTERM, waits the grace period, then SIGKILL, and records `cancelled` unless the
tool finished first. After a restart, a task whose lease expired is re-run only if its tool is
idempotent; otherwise it is `failed` with an error saying the outcome is unknown. It also serves
synchronous (non-task) runs for the gateway and sweeps expired tasks. A warm tool's runs (`spec.warm`)
are calls on its warm workers (`warm_pool.WarmRun`) instead of processes of their own, supervised alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import os
import secrets
import shutil
import socket
import tempfile
from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Final

import aiohttp
from aiohttp import web

from mcp_tasks.observability import metrics, tracing
from mcp_tasks.observability.logs import bind_task, task_context
from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.runner import identity
from mcp_tasks.runner.process import ToolProcess, command_for, stop_group
from mcp_tasks.runner.warm_pool import WarmBusy, WarmPool, WarmRun, WarmUnavailable, WarmWorkers
from mcp_tasks.runtime import contract
from mcp_tasks.tasks import inline, results, transitions
from mcp_tasks.tasks.errors import IllegalTransition, LeaseLost, StoreUnavailable, TaskNotFound, VersionConflict
from mcp_tasks.tasks.ids import TaskId, mint_task_id
from mcp_tasks.tasks.interfaces import (
    ArtifactStore,
    Clock,
    InlineCall,
    InputNeeded,
    TaskStore,
    ToolCatalog,
    Writer,
    notify_written,
    transact,
)
from mcp_tasks.tasks.record import LeaseProcess, TaskRecord
from mcp_tasks.tasks.results import error_result
from mcp_tasks.tasks.tools import ToolSpec
from mcp_tasks.worker.api import create_worker_app
from mcp_tasks.worker.channel import ChannelError, Transition, WorkerChannel
from mcp_tasks.worker.executions import AskedForInput, Execution, ExecutionPending, ExecutionTable, Finished

logger = logging.getLogger("mcp_tasks.runner")

_STOPPED_OUTCOME_UNKNOWN: Final = (
    "The server was stopped while this task ran and the tool is not declared idempotent, so the outcome is "
    "unknown; check the tool's side effects before calling it again"
)
_OUTCOME_UNKNOWN: Final = (
    "The worker running this task was lost (server restart or crash) and the tool is not declared idempotent, "
    "so the outcome is unknown; check the tool's side effects before calling it again"
)


MAX_WARM_ATTEMPTS: Final = 3
"""Runs of one task on warm workers that may be lost (the worker died, or none took the call) before it fails."""

_STORE_RETRY_FIRST_S: Final = 0.1
"""First wait before retrying a write the task store refused as unavailable, in seconds (then doubling)."""
_STORE_RETRY_MAX_S: Final = 5.0
"""Longest wait between such retries, in seconds."""


async def first_of(*waits: Awaitable[object]) -> None:
    """Wait until the first of `waits` finishes; cancel and reap the others, also when cancelled ourselves."""
    tasks = [asyncio.ensure_future(wait) for wait in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _abandon(record: TaskRecord, now: datetime) -> TaskRecord:
    return transitions.cancel(record, now, transitions.ABANDONED_MESSAGE)


ToolRun = ToolProcess | WarmRun
"""A run the runner supervises: its own process, or a call on a warm worker (`spec.warm`)."""


def _cannot_start(tool: ToolSpec, exc: OSError) -> str:
    """Why a tool's command could not be started, naming the program and what to check."""
    if isinstance(exc, WarmUnavailable):
        return str(exc)
    program = command_for(tool)[0]
    hint = " (is it installed, and on PATH or given as a path relative to the manifest's folder?)"
    missing = isinstance(exc, FileNotFoundError)
    return f"cannot start tool {tool.name!r}: {program!r}: {exc.strerror or exc}" + (hint if missing else "")


def _read_port(path: Path | None) -> int:
    """The worker port a previous runner recorded, or 0 (any free port)."""
    try:
        text = path.read_text().strip() if path is not None else ""
    except OSError:
        return 0
    return int(text) if text.isdigit() and 0 < int(text) < 65536 else 0


@dataclass(frozen=True, slots=True)
class RunnerSettings:
    """Settings of the embedded runner (group `runner` of `Settings`).

    Attributes:
        max_concurrent_tasks: task processes run at once; more wait as `working`. Default 16.
        lease_duration_s: worker lease length in seconds; renewed every third of it. A crashed server's
            tasks are recovered this long after the crash. Default 30.
        claim_poll_s: how often to look for runnable tasks written by other processes, in seconds. Default 1.
        sweep_interval_s: how often expired tasks are deleted, in seconds. Default 30.
        inline_result_max_bytes: largest result kept inline, in bytes (default 256 KiB); larger → artifact.
        artifact_max_bytes: largest result accepted at all, in bytes (default 64 MiB).
        shutdown_grace_s: SIGTERM → SIGKILL grace for running tools when the server stops, in seconds.
        max_input_rounds: synchronous runs that may wait for their callers' next input round at once
            (SEP-2322); they do not take task slots. Past it a run's ask is refused and its call ends
            with a tool error saying so. Default 64.
    """

    max_concurrent_tasks: int = 16
    lease_duration_s: float = 30.0
    claim_poll_s: float = 1.0
    sweep_interval_s: float = 30.0
    inline_result_max_bytes: int = 256 * 1024
    artifact_max_bytes: int = 64 * 1024 * 1024
    shutdown_grace_s: float = 5.0
    max_input_rounds: int = 64


class LocalRunner:
    """The embedded executor; also the gateway's `ToolExecutor` for synchronous calls.

    Use `await start()` and `await aclose()`. A restarted server adopts the runs of a crashed one
    (docs/design.md §7) when it gets the same `state_dir` (worker port, stderr files) and the same
    persisted `worker_key` (the tools' tokens are derived from it); without them runs are not adoptable.
    """

    def __init__(
        self,
        store: TaskStore,
        catalog: ToolCatalog,
        artifacts: ArtifactStore,
        clock: Clock,
        settings: RunnerSettings,
        state_dir: Path | None = None,
        worker_key: bytes | None = None,
    ) -> None:
        self.store = store
        self.catalog = catalog
        self.artifacts = artifacts
        self.clock = clock
        self.settings = settings
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.executions = ExecutionTable()
        self.channel = WorkerChannel(store, artifacts, clock, settings.inline_result_max_bytes, promote=self._promote)
        self._supervisors: dict[str, asyncio.Task[None]] = {}
        self._in_rounds: set[str] = set()  # supervised synchronous runs parked for input rounds (not tasks)
        self._closing = False
        self._loops: list[asyncio.Task[None]] = []
        self._web_runner: web.AppRunner | None = None
        self._base_url = ""
        self._port = 0
        self._capacity_freed = asyncio.Event()
        self._pools: dict[str, WarmWorkers] = {}  # tool name → its warm workers (`spec.warm`)
        self._session: aiohttp.ClientSession | None = None  # calls to warm workers
        self._pool_starts: set[asyncio.Task[None]] = set()
        # Where runs survive this process: the worker port (tools keep calling it) and each run's stderr
        # file; with the persisted worker key (tokens a restarted runner can verify) runs are adoptable.
        # Without a state folder a temporary folder holds the stderr files and the key lives in memory.
        self._state_dir = state_dir
        self._runs_dir = (state_dir / "runs") if state_dir is not None else Path(tempfile.mkdtemp(prefix="mcptasks-"))
        self._worker_key = worker_key if worker_key is not None else secrets.token_bytes(32)

    @property
    def _running_tasks(self) -> int:
        """Task runs supervised now; synchronous runs parked for input rounds have their own bound."""
        return len(self._supervisors) - len(self._in_rounds)

    @property
    def _lease(self) -> timedelta:
        return timedelta(seconds=self.settings.lease_duration_s)

    async def start(self) -> None:
        """Serve the worker API on loopback, then start the claim and sweep loops.

        With a state folder the port is the one the previous runner used, when it is free, so the tools
        that outlived it reach this runner and can be adopted; otherwise any free port.
        """
        app = create_worker_app(self, self.channel, self.settings.artifact_max_bytes + 64 * 1024)
        # A tool's long-poll must not hold up shutdown: cancel handlers whose tool is gone, wait ≤1 s.
        self._web_runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0, handler_cancellation=True)
        await self._web_runner.setup()
        port_file = None if self._state_dir is None else self._state_dir / "worker-port"
        previous = _read_port(port_file)
        try:
            await web.TCPSite(self._web_runner, "127.0.0.1", previous).start()
            taken = False
        except OSError:
            # Another server on this data folder (or another program) has it. Keep the record: the tools
            # of whoever holds it keep calling it, and that server's restart must find it again.
            logger.warning(
                "worker port %s is taken (another server on this data folder?); runs started here "
                "use another port and cannot be adopted after a crash",
                previous,
            )
            await web.TCPSite(self._web_runner, "127.0.0.1", 0).start()
            taken = True
        port = self._web_runner.addresses[0][1]
        self._port = port
        if port_file is not None and not taken:
            port_file.write_text(str(port))
        self._base_url = f"http://127.0.0.1:{port}/v1/executions"
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, force_close=False),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=5),
        )
        for tool in self.catalog.list_tools():
            if tool.warm is not None:
                self._pool(tool)  # minWorkers of each warm tool start now
        self._loops = [
            asyncio.create_task(self._claim_loop(), name="runner-claim"),
            asyncio.create_task(self._sweep_loop(), name="runner-sweep"),
        ]
        logger.info("runner %s started; worker API on 127.0.0.1:%s", self.holder, port)

    async def aclose(self) -> None:
        """Stop claiming, stop running tools (their tasks follow the restart rules), stop the worker API."""
        for loop in self._loops:
            loop.cancel()
        for loop in self._loops:
            with contextlib.suppress(asyncio.CancelledError):
                await loop
        self._closing = True  # from now on a synchronous run that asks for input is stopped, not handed over
        for _ in range(3):  # a hand-over racing this shutdown adds a supervisor after the first snapshot
            supervisors = list(self._supervisors.values())
            if not supervisors:
                break
            for supervisor in supervisors:
                supervisor.cancel()
            _done, pending = await asyncio.wait(supervisors, timeout=self.settings.shutdown_grace_s + 5)
            for task in pending:
                logger.error("task supervisor %s did not stop in time", task.get_name())
        # kept, closed: a call arriving this late finds its pool closed rather than starting a new one
        await asyncio.gather(*(pool.aclose(self.settings.shutdown_grace_s) for pool in self._pools.values()))
        if self._session is not None:
            await self._session.close()
        if self._web_runner is not None:
            await self._web_runner.cleanup()
        if self._state_dir is None:
            await asyncio.to_thread(shutil.rmtree, self._runs_dir, True)  # the temporary stderr folder

    # ---------------------------------------------------------------- runs: a process, or a warm call

    def _pool(self, tool: ToolSpec) -> WarmWorkers:
        """The warm pool of `tool` (`spec.warm`), started on first use."""
        pool = self._pools.get(tool.name)
        if pool is None:
            pool = self._pools[tool.name] = self._new_pool(tool)
            starting = asyncio.get_running_loop().create_task(pool.start())
            self._pool_starts.add(starting)
            starting.add_done_callback(self._pool_starts.discard)
        return pool

    def _new_pool(self, tool: ToolSpec) -> WarmWorkers:
        """Local worker processes of `tool` (the operator's warm runner uses its pods instead)."""
        assert self._session is not None, "start() first"
        return WarmPool(tool, self._session, self._runs_dir)

    def _new_run(self, tool: ToolSpec, execution: Execution, acquire_timeout_s: float | None) -> ToolRun:
        """How `execution` runs: a call on one of the tool's warm workers, or a process of its own."""
        if tool.warm is not None:
            return WarmRun(self._pool(tool), execution, self.channel, self._base_url, acquire_timeout_s)
        return ToolProcess(tool, self._contract_env(execution), self._runs_dir / f"{execution.execution_id}.stderr")

    # ---------------------------------------------------------------- worker API lookup and adoption

    def _token_for(self, execution_id: str) -> str:
        """The worker token of a task run: derived from the worker key, so a restarted runner can verify it."""
        return hmac.new(self._worker_key, execution_id.encode(), hashlib.sha256).hexdigest()

    def _task_execution(self, record: TaskRecord, execution_id: str) -> Execution:
        tool = self.catalog.get_tool(record.tool)
        return Execution(
            tool=tool,
            arguments=record.arguments,
            task_id=record.task_id,
            attempt=record.attempt,
            pre_input_responses=record.pre_input_responses,
            execution_id=execution_id,
            token=self._token_for(execution_id),
        )

    async def resolve(self, execution_id: str, token: str) -> Execution | None:
        """`ExecutionLookup` for the worker API: a run of this runner, or one a crashed runner left behind.

        A call from a tool whose runner crashed carries a token this runner can verify (same worker key);
        its run is adopted on the spot when its process still runs (docs/design.md §7).

        Raises:
            ExecutionPending: the run is being set up or taken over; the tool should retry (503).
        """
        found = self.executions.find(execution_id, token)
        if found is not None:
            return found
        task_id, _, attempt = execution_id.rpartition(".")
        if not task_id or not attempt.isdigit():
            return None
        if not hmac.compare_digest(token.encode(), self._token_for(execution_id).encode()):
            return None
        if task_id in self._supervisors:
            raise ExecutionPending(execution_id)
        try:
            record = await self.store.get(task_id)
        except TaskNotFound:
            return None
        running = None if record.lease is None else record.lease.process
        if record.status.is_terminal or running is None or running.execution_id != execution_id:
            return None
        assert record.lease is not None  # running is not None
        holder_alive = identity.holder_is_alive(record.lease.holder)
        if holder_alive or (holder_alive is None and record.lease.expires_at > self.clock()):
            return None  # a live runner holds it; not ours to take
        tool = self.catalog.get_tool(record.tool)
        if tool is None or record.cancel_requested_at is not None:
            return None  # the claim loop stops it and settles the task
        try:
            adopted = await self._adopt(record, tool, running)
        except (VersionConflict, IllegalTransition) as exc:
            raise ExecutionPending(execution_id) from exc
        if adopted is None:
            return None
        return self.executions.find(execution_id, token)

    async def _adopt(self, record: TaskRecord, tool: ToolSpec, running: LeaseProcess) -> TaskRecord | None:
        """Take over a run whose process outlived its runner; `None` when it cannot be adopted.

        Raises:
            VersionConflict: another runner changed the task first.
        """
        if running.worker_port != self._port or not identity.is_alive(running.pid, running.identity):
            return None
        retention_ms = tool.execution.ttl_ms
        adopted = await self._write(
            record, transitions.adopt(record, self.holder, self.clock(), self._lease, retention_ms)
        )
        execution = self._task_execution(adopted, running.execution_id)
        self.executions.add(execution)
        self._supervisors[adopted.task_id] = asyncio.create_task(
            self._supervise(adopted, running, execution), name=f"task-{adopted.task_id}"
        )
        logger.warning(
            "task %s: adopted %s (pid %s) left running by a previous runner", adopted.task_id, tool.name, running.pid
        )
        return adopted

    async def _stop_orphan(self, record: TaskRecord, tool: ToolSpec | None) -> None:
        """Stop a live process of a run that cannot be adopted, before the restart rules decide its task."""
        running = None if record.lease is None else record.lease.process
        if running is None or not identity.is_alive(running.pid, running.identity):
            return
        grace = tool.execution.cancel_grace_seconds if tool else self.settings.shutdown_grace_s
        logger.warning("task %s: stopping pid %s left running by a previous runner", record.task_id, running.pid)
        await stop_group(running.pid, running.identity, grace)

    # ---------------------------------------------------------------- claiming

    async def _claim_loop(self) -> None:
        while True:
            try:
                await self._claim_runnable()
            except asyncio.CancelledError:
                raise
            except StoreUnavailable as exc:
                logger.warning("claim pass skipped: task store unavailable (%s)", exc)
            except Exception:
                logger.exception("claim pass failed; retrying")
            # New tasks wake us only while there is room to run them; freed capacity always does.
            if self._running_tasks < self.settings.max_concurrent_tasks:
                more = self.store.wait_for_new_tasks(self.settings.claim_poll_s)
            else:
                more = asyncio.sleep(self.settings.claim_poll_s)
            await first_of(more, self._capacity_freed.wait())
            self._capacity_freed.clear()

    async def _runnable(self, capacity: int) -> list[TaskRecord]:
        """Up to `capacity` tasks to claim now: unfinished, without a live lease, oldest first."""
        return list(await self.store.list_runnable(self.clock(), capacity))

    async def _claim_runnable(self) -> None:
        capacity = self.settings.max_concurrent_tasks - self._running_tasks
        if capacity <= 0:
            return
        for record in await self._runnable(capacity):
            if record.task_id in self._supervisors:
                continue
            with task_context(record.task_id, record.tool):
                claimed = await self._claim(record)
            if claimed is not None:
                execution = self._task_execution(claimed, f"{claimed.task_id}.{claimed.attempt}")
                self._supervisors[claimed.task_id] = asyncio.create_task(
                    self._supervise(claimed, None, execution), name=f"task-{claimed.task_id}"
                )

    async def _write(self, before: TaskRecord, updated: TaskRecord) -> TaskRecord:
        """`compare_and_swap(updated)`, reported to the write observers (metrics) like `transact` does."""
        written = await self.store.compare_and_swap(updated, Writer.EXECUTOR)
        notify_written(before, written)
        return written

    async def _claim(self, record: TaskRecord) -> TaskRecord | None:
        """Take the lease, applying the restart rules; return the record to run, or None.

        A run whose process outlived its runner is adopted (supervised here, not started again) when it
        can be; otherwise that process is stopped first, then the rules apply as for a lost worker.
        """
        now = self.clock()
        tool = self.catalog.get_tool(record.tool)
        retention_ms = tool.execution.ttl_ms if tool else record.ttl_ms
        try:
            running = None if record.lease is None else record.lease.process
            if (
                running is not None
                and tool is not None
                and record.cancel_requested_at is None
                and not transitions.is_abandoned(record, now)
                and await self._adopt(record, tool, running) is not None
            ):
                return None  # supervised by _adopt
            await self._stop_orphan(record, tool)
            if transitions.is_abandoned(record, now):  # a hidden task whose caller died with the last runner
                logger.warning("task %s: its caller is gone; cancelled instead of run", record.task_id)
                await self._write(record, transitions.cancel(record, now, transitions.ABANDONED_MESSAGE))
                return None
            if record.cancel_requested_at is not None:
                await self._write(record, transitions.cancel(record, now))
                return None
            if tool is None:
                gone = transitions.failing(
                    f"Tool {record.tool!r} is no longer declared; the task cannot run", "ToolRemoved"
                )
                await self._write(record, gone(record, now))
                return None
            if record.lease is not None:  # a previous worker held it and is gone
                if not tool.execution.idempotent:
                    await self._write(record, transitions.failing(_OUTCOME_UNKNOWN, "OutcomeUnknown")(record, now))
                    logger.error("task %s lost its worker; failed (outcome unknown)", record.task_id)
                    return None
                logger.warning("task %s lost its worker; re-running (idempotent tool)", record.task_id)
                record = transitions.reset_for_rerun(record, now)
            return await self._write(record, transitions.claim(record, self.holder, now, self._lease, retention_ms))
        except (VersionConflict, TaskNotFound, IllegalTransition):
            return None  # another runner moved first

    # ---------------------------------------------------------------- one task

    async def _supervise(self, record: TaskRecord, adopted: LeaseProcess | None, execution: Execution) -> None:
        tool = self.catalog.get_tool(record.tool)
        assert tool is not None  # _claim and _adopt checked
        await self._supervised(record.task_id, tool, self._run_task(record, tool, execution, adopted))

    async def _supervised(self, task_id: str, tool: ToolSpec, run: Awaitable[None]) -> None:
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
            await self._finish_if_running(task_id, transitions.failing("Internal error in the runner", "InternalError"))
        finally:
            self._supervisors.pop(task_id, None)
            self._in_rounds.discard(task_id)
            self._capacity_freed.set()

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
        if adopted is not None:
            log_path = self._runs_dir / f"{execution.execution_id}.stderr"
            process = ToolProcess.adopt(tool, adopted.pid, adopted.identity, log_path)
        else:
            process = self._new_run(tool, execution, self.settings.lease_duration_s / 3)
        self.executions.add(execution)
        try:
            if adopted is None:
                try:
                    if not await self._start(record.task_id, tool, process):
                        return  # cancelled (or finished) while it waited for a warm worker
                    metrics.RUNS_STARTED.labels(tool.name).inc()
                except OSError as exc:
                    message = _cannot_start(tool, exc)
                    await self._finish_if_running(record.task_id, transitions.failing(message, "CannotStart"))
                    return
                where = "on a warm worker" if isinstance(process, WarmRun) else f"pid {process.pid}"
                logger.info("task %s: started %s (%s, attempt %s)", record.task_id, tool.name, where, record.attempt)
                await self._recorded(record.task_id, tool, process, execution)
            await self._follow(record.task_id, tool, process, execution)
        finally:
            self.executions.remove(execution)
            process.discard_log()

    async def _follow(
        self,
        task_id: str,
        tool: ToolSpec,
        process: ToolRun,
        execution: Execution,
        exited: asyncio.Task[int | None] | None = None,
    ) -> None:
        """Watch a started process until it ends, then record how (`_watch`, `_conclude`)."""
        if exited is None:
            exited = asyncio.create_task(process.wait(), name=f"wait-{task_id}")
        try:
            reason = await self._watch(task_id, tool, process, exited)
            await self._conclude(task_id, tool, process, execution, reason)
        except asyncio.CancelledError:
            await self._stop_on_shutdown(task_id, tool, process)
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
        and a cancel (or a caller gone) settles the task without running it. A task that no worker took
        within its `maxRunTimeSeconds` fails (`StartTimeout`).

        Raises:
            OSError: the run cannot start (the command, or warm workers that fail to start).
        """
        since = self.clock()
        while True:
            try:
                await process.start()
                return True
            except WarmBusy:
                record = await self.store.get(task_id)
                now = self.clock()
                if record.status.is_terminal:
                    return False
                if record.cancel_requested_at is not None or transitions.is_abandoned(record, now):
                    cancel = transitions.cancel if record.cancel_requested_at is not None else _abandon
                    await self._finish_if_running(task_id, cancel)
                    return False
                limit_s = tool.execution.max_run_time_seconds
                if (now - since).total_seconds() >= limit_s:
                    message = f"No warm worker of tool {tool.name!r} took the task within {limit_s:g}s"
                    await self._finish_if_running(task_id, transitions.failing(message, "StartTimeout"))
                    return False
                renewed = transitions.renew(record, self.holder, now, self._lease, tool.execution.ttl_ms)
                with contextlib.suppress(VersionConflict):  # the client wrote meanwhile: read again
                    await self._write(record, renewed)

    async def _recorded(self, task_id: str, tool: ToolSpec, process: ToolRun, execution: Execution) -> None:
        """`_record_process`, and a server stopping meanwhile stops the run it started (as `_follow` would)."""
        try:
            await self._record_process(task_id, process, execution)
        except asyncio.CancelledError:
            await self._stop_on_shutdown(task_id, tool, process)
            raise

    async def _record_process(self, task_id: str, process: ToolRun, execution: Execution) -> None:
        """Write which process runs the attempt into the lease, so a restarted runner can adopt it."""
        pid = process.pid
        known = None if pid is None else identity.of(pid)
        if pid is None or known is None or self._state_dir is None:
            return  # no identity (no /proc) or no state folder: this run cannot be adopted
        running = LeaseProcess(pid=pid, identity=known, execution_id=execution.execution_id, worker_port=self._port)
        try:
            await transact(
                self.store,
                task_id,
                lambda r: (transitions.record_process(r, self.holder, running), None),
                Writer.EXECUTOR,
            )
        except StoreUnavailable as exc:
            logger.warning("task %s: could not record its process (%s); it cannot be adopted", task_id, exc)

    async def _watch(self, task_id: str, tool: ToolSpec, process: ToolRun, exited: asyncio.Task[int | None]) -> str:
        """Renew the lease until the process exits, cancel is requested, or a limit passes.

        Limits: `maxRunTimeSeconds` of working time (time in `input_required` does not count) →
        "deadline"; one wait for input longer than `maxInputWaitSeconds` → "input-timeout".
        While the task store cannot answer (`StoreUnavailable`: disk full, read-only file system) the tool
        keeps running: reads and renewals are retried with back-off (0.1 s doubling up to a third of the
        lease), since nothing else can take the lease over a store that cannot write either.
        """
        started = self.clock()
        limits = tool.execution
        waited_before_ms: int | None = None  # the task's input wait when this run started
        renew_every = self.settings.lease_duration_s / 3
        next_renew = self.clock() + timedelta(seconds=renew_every)
        backoff_s = _STORE_RETRY_FIRST_S
        until_limit_s = limits.max_run_time_seconds
        while True:
            now = self.clock()
            if exited.done():
                return "exited"
            process.trim_log()
            try:
                record = await self.store.get(task_id)
                if record.status.is_terminal:
                    return "finished"
                if record.cancel_requested_at is not None:
                    return "cancel"
                if transitions.is_abandoned(record, now):
                    return "abandoned"
                if waited_before_ms is None:
                    waited_before_ms = record.input_wait_ms
                if transitions.input_wait_exceeded(record, limits.max_input_wait_seconds, now):
                    return "input-timeout"
                used_s = transitions.run_time_used_s(record, started, now, waited_before_ms)
                if used_s >= limits.max_run_time_seconds:
                    return "deadline"
                if record.input_required_since is not None:  # waiting: only the input-wait limit runs
                    until_limit_s = limits.max_input_wait_seconds - (now - record.input_required_since).total_seconds()
                else:
                    until_limit_s = limits.max_run_time_seconds - used_s
                if now >= next_renew:
                    try:
                        await transact(
                            self.store,
                            task_id,
                            lambda r: (
                                transitions.renew(r, self.holder, self.clock(), self._lease, tool.execution.ttl_ms),
                                None,
                            ),
                            Writer.EXECUTOR,
                        )
                    except LeaseLost:
                        if (await self.store.get(task_id)).status.is_terminal:
                            return "finished"  # the result landed between our read and the renewal
                        raise
                    next_renew = now + timedelta(seconds=renew_every)
            except StoreUnavailable as exc:
                logger.warning(
                    "task %s: task store unavailable (%s); the tool keeps running, retrying in %.1fs",
                    task_id,
                    exc,
                    backoff_s,
                )
                await first_of(asyncio.sleep(backoff_s), asyncio.shield(exited))
                backoff_s = min(backoff_s * 2, renew_every)
                continue
            backoff_s = _STORE_RETRY_FIRST_S
            until_s = min(until_limit_s + 0.01, (next_renew - now).total_seconds())
            await first_of(self.store.wait_for_change(max(until_s, 0.01), task_id), asyncio.shield(exited))

    async def _conclude(
        self, task_id: str, tool: ToolSpec, process: ToolRun, execution: Execution, reason: str
    ) -> None:
        grace = tool.execution.cancel_grace_seconds
        if reason == "cancel":
            await process.stop(grace)
            logger.info("task %s: cancelled; tool stopped", task_id)
            await self._finish_if_running(task_id, transitions.cancel)
            return
        if reason == "abandoned":
            await process.stop(grace)
            logger.info("task %s: its caller is gone; tool stopped", task_id)
            await self._finish_if_running(
                task_id, lambda r, now: transitions.cancel(r, now, transitions.ABANDONED_MESSAGE)
            )
            return
        if reason == "deadline":
            await process.stop(grace)
            message = f"Tool {tool.name!r} exceeded its maximum run time of {tool.execution.max_run_time_seconds:g}s"
            logger.warning("task %s: %s", task_id, message)
            await self._finish_if_running(task_id, transitions.failing(message, "DeadlineExceeded"))
            return
        if reason == "input-timeout":
            await process.stop(grace)
            message = transitions.input_wait_message(tool.name, tool.execution.max_input_wait_seconds)
            logger.warning("task %s: %s", task_id, message)
            await self._finish_if_running(task_id, transitions.failing(message, "InputTimeout"))
            return
        if reason == "finished":
            # The result is recorded; give the tool its grace period to exit by itself.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(grace, 1.0)):
                    await process.wait()
            await process.stop(grace)
            return
        code = await process.wait()
        if execution.outcome.done() and isinstance(execution.outcome.result(), Finished):
            return  # it posted its result (a promoted run's outcome says only that it asked for input)
        if process.worker_lost:  # the warm worker died mid-call: the restart rules, as for a lost lease
            await self._finish_if_running(task_id, lambda r, now: self._after_lost_worker(r, tool, process, now))
            return
        result = results.exited_without_result(tool.name, code, process.stderr_tail())
        logger.warning("task %s: tool exited with code %s without a result", task_id, code)
        await self._finish_if_running(task_id, lambda r, now: transitions.complete(r, result, now))

    def _after_lost_worker(self, record: TaskRecord, tool: ToolSpec, process: ToolRun, now: datetime) -> TaskRecord:
        """A task whose warm worker died mid-call: re-run when its tool is idempotent (or the call never
        reached a worker), at most `MAX_WARM_ATTEMPTS` runs in all; else the outcome is unknown.
        """
        why = process.stderr_tail()
        if record.attempt >= MAX_WARM_ATTEMPTS:
            message = f"Tool {tool.name!r} lost its warm worker on each of {record.attempt} runs (last: {why})"
            logger.error("task %s: %s; failed", record.task_id, message)
            return transitions.failing(message, "WorkerLost")(record, now)
        if tool.execution.idempotent or not process.delivered:
            logger.warning("task %s lost its warm worker (%s); re-running", record.task_id, why)
            return transitions.reset_for_rerun(record, now)
        logger.error("task %s lost its warm worker (%s); failed (outcome unknown)", record.task_id, why)
        return transitions.failing(_OUTCOME_UNKNOWN, "OutcomeUnknown")(record, now)

    async def _finish_if_running(self, task_id: str, change: Transition) -> None:
        def apply(record: TaskRecord) -> tuple[TaskRecord, None]:
            if record.status.is_terminal:
                return record, None
            return change(record, self.clock()), None

        backoff_s = _STORE_RETRY_FIRST_S
        while True:  # the outcome is known: keep it until the store can take it (or the runner stops)
            try:
                with contextlib.suppress(TaskNotFound):
                    await transact(self.store, task_id, apply, Writer.EXECUTOR)
                return
            except StoreUnavailable as exc:
                logger.warning("task %s: cannot record the outcome yet (%s); retry in %.1fs", task_id, exc, backoff_s)
                await asyncio.sleep(backoff_s)
                backoff_s = min(backoff_s * 2, _STORE_RETRY_MAX_S)

    async def _stop_on_shutdown(self, task_id: str, tool: ToolSpec, process: ToolRun) -> None:
        """The server is stopping: stop the tool; a non-idempotent task's outcome is now unknown."""
        await asyncio.shield(process.stop(self.settings.shutdown_grace_s))

        def apply(record: TaskRecord) -> tuple[TaskRecord, bool]:
            if record.status.is_terminal:
                return record, False  # it finished first: nothing was lost
            if tool.execution.idempotent:
                return transitions.reset_for_rerun(record, self.clock()), True
            return transitions.failing(_STOPPED_OUTCOME_UNKNOWN, "OutcomeUnknown")(record, self.clock()), True

        with contextlib.suppress(TaskNotFound, VersionConflict, IllegalTransition):
            _record, interrupted = await asyncio.shield(transact(self.store, task_id, apply, Writer.EXECUTOR))
            if interrupted:
                after = (
                    "re-run at the next start (idempotent)" if tool.execution.idempotent else "failed (outcome unknown)"
                )
                logger.warning("task %s: %s stopped by the server's shutdown; %s", task_id, tool.name, after)

    def _contract_env(self, execution: Execution) -> dict[str, str]:
        env = {
            contract.ENV_WORKER_URL: f"{self._base_url}/{execution.execution_id}",
            contract.ENV_WORKER_TOKEN: execution.token,
            contract.ENV_TASK_ID: execution.task_id or "",
        }
        if execution.traceparent is not None:
            env[tracing.ENV_TRACEPARENT] = execution.traceparent  # the tool's own spans join the trace
        return env

    # ---------------------------------------------------------------- synchronous runs

    async def run_inline(self, call: InlineCall) -> JsonObject:
        """Run a tool synchronously (no task) and return its `CallToolResult` (`ToolExecutor`).

        Nothing is written to the task store unless the tool asks for input: then the run becomes a hidden
        task under this runner's lease (`_promote`), its process is handed to a supervisor as a claimed
        task's is, and `InputNeeded` names the task so the caller can answer in its next round.

        Raises:
            InputNeeded: the tool asked for input mid-run.
            TimeoutError: it did not finish within `syncTimeoutSeconds`.
        """
        tool = call.tool
        # The id its hidden task gets if it asks for input: the run is then attempt 1 of that task, with
        # the derived token, so a restarted runner can adopt it (or stop it) like any task's run.
        reserved = mint_task_id()
        execution_id = f"{reserved}.1"
        execution = Execution(
            tool=tool,
            arguments=call.arguments,
            task_id=None,
            execution_id=execution_id,
            token=self._token_for(execution_id),
            reserved_task_id=reserved,
            pre_input_responses=dict(call.pre_input_responses),
            owner=call.owner,
            client_capabilities=call.client_capabilities,
            offered_responses=dict(call.input_responses),
            on_progress=call.on_progress,
        )
        process = self._new_run(tool, execution, tool.execution.sync_timeout_seconds)
        grace = tool.execution.cancel_grace_seconds
        # one bound for the whole call: waiting for a warm slot counts against syncTimeoutSeconds too
        deadline = asyncio.get_running_loop().time() + tool.execution.sync_timeout_seconds
        self.executions.add(execution)
        handed_over = False
        try:
            try:
                await process.start()
                metrics.RUNS_STARTED.labels(tool.name).inc()
            except OSError as exc:
                message = _cannot_start(tool, exc)
                return error_result(message[0].upper() + message[1:])
            exited = asyncio.create_task(process.wait(), name=f"inline-{tool.name}")
            try:
                async with asyncio.timeout_at(deadline):
                    await first_of(asyncio.shield(exited), asyncio.shield(execution.outcome))
                    if not execution.outcome.done():
                        # Exited first: give a racing result POST a moment, then conclude from the exit.
                        await asyncio.wait({execution.outcome}, timeout=0.05)
                outcome = execution.outcome.result() if execution.outcome.done() else None
                promoted = isinstance(outcome, AskedForInput) and outcome.task_id is not None
                if promoted and not exited.done() and not self._closing:
                    assert isinstance(outcome, AskedForInput) and outcome.task_id is not None
                    self._hand_over(outcome.task_id, tool, process, execution, exited)
                    handed_over = True
                    raise InputNeeded(tool.name, outcome.task_id)
                if isinstance(outcome, Finished) and not exited.done():
                    # The result is in: let the tool finish its own clean-up, as a task's tool may.
                    await asyncio.wait({exited}, timeout=max(grace, 1.0))
            finally:
                if not handed_over:
                    await process.stop(grace)
                    exited.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await exited
                    if execution.task_id is not None:  # promoted, then stopped (timeout, caller gone, exit)
                        await asyncio.shield(self._settle_stopped_promotion(execution.task_id, tool))
            if not execution.outcome.done():
                if process.worker_lost and not process.delivered:
                    return error_result(f"No warm worker of {tool.name!r} took the call ({process.stderr_tail()})")
                if process.worker_lost:
                    return results.worker_lost_mid_call(tool.name, process.stderr_tail())
                return results.exited_without_result(tool.name, exited.result(), process.stderr_tail())
            outcome = execution.outcome.result()
            if isinstance(outcome, AskedForInput):
                if self._closing:
                    return error_result(f"The server stopped while {tool.name!r} asked for input; call it again")
                if execution.task_id is not None:  # promoted, but its process ended before the hand-over
                    code = exited.result() if exited.done() and not exited.cancelled() else None
                    return results.exited_without_result(tool.name, code, process.stderr_tail())
                raise InputNeeded(tool.name)
            if outcome.result is not None:
                return outcome.result
            return error_result(str((outcome.error or {}).get("message", "tool failed")))
        finally:
            if not handed_over:
                self.executions.remove(execution)
                process.discard_log()

    async def _promote(self, execution: Execution, requests: list[tuple[str, JsonObject]]) -> list[str]:
        """`Promote` for the worker channel: the synchronous run asking for input becomes a hidden task.

        The task is created already claimed by this runner (lease, attempt 1) and parked on `requests`, in
        one durable write, so no other runner starts it again and the caller's next round finds it.
        Requests that the call's up-front `inputResponses` answer validly are answered in that same write.

        Raises:
            InputCapabilityMissing: the caller did not declare a capability a request needs (nothing written).
            ChannelError: 429 when `max_input_rounds` synchronous runs are parked already.
        """
        assert execution.tool is not None and execution.owner is not None  # run_inline sets both
        assert execution.reserved_task_id is not None
        if len(self._in_rounds) >= self.settings.max_input_rounds:
            raise ChannelError(
                429,
                f"{len(self._in_rounds)} synchronous calls already wait for their clients' input "
                f"(MCPTASKS_MAX_INPUT_ROUNDS); call again later, or call with the tasks extension",
            )
        now = self.clock()
        fresh = transitions.new_task(
            TaskId(execution.reserved_task_id),
            execution.owner,
            execution.tool,
            execution.arguments,
            now,
            execution.pre_input_responses,
            execution.client_capabilities,
        )
        claimed = transitions.claim(inline.hidden(fresh), self.holder, now, self._lease, inline.INLINE_TTL_MS)
        parked, minted = transitions.add_input_requests(claimed, requests, now)
        offered = inline.offered_answers(parked, execution.offered_responses)
        if offered:
            parked = transitions.answer_input_requests(parked, offered, now)
        stored = await self.store.create(parked)
        notify_written(None, stored)
        execution.task_id = stored.task_id
        execution.settle(AskedForInput(stored.task_id))
        logger.info(
            "synchronous call of %s asked for input; it continues as hidden task %s", stored.tool, stored.task_id
        )
        return minted

    def _hand_over(
        self, task_id: str, tool: ToolSpec, process: ToolRun, execution: Execution, exited: asyncio.Task[int | None]
    ) -> None:
        """Supervise a promoted run's live process as a claimed task's (lease renewal, deadline, cancel)."""

        async def follow() -> None:
            try:
                await self._recorded(task_id, tool, process, execution)
                await self._follow(task_id, tool, process, execution, exited)
            finally:
                self.executions.remove(execution)
                process.discard_log()

        self._in_rounds.add(task_id)
        self._supervisors[task_id] = asyncio.create_task(
            self._supervised(task_id, tool, follow()), name=f"task-{task_id}"
        )

    async def _settle_stopped_promotion(self, task_id: str, tool: ToolSpec) -> None:
        """A promoted run was stopped before its caller saw the input requests: its hidden task is cancelled."""
        await self._finish_if_running(
            task_id, lambda r, now: transitions.cancel(r, now, f"The synchronous call of {tool.name!r} ended first")
        )

    # ---------------------------------------------------------------- expiry

    async def _sweep_loop(self) -> None:
        while True:
            try:
                await self.sweep_expired(self.clock())
                metrics.swept(await self.store.unfinished(), self.clock())
            except asyncio.CancelledError:
                raise
            except StoreUnavailable as exc:
                logger.warning("expiry sweep skipped: task store unavailable (%s)", exc)
            except Exception:
                logger.exception("expiry sweep failed; retrying")
            await asyncio.sleep(self.settings.sweep_interval_s)

    async def sweep_expired(self, now: datetime) -> int:
        """Delete finished tasks past `createdAt + ttlMs`, and their artifacts; return how many."""
        deleted = 0
        while ids := await self.store.delete_expired(now, 500):
            for task_id in ids:
                await self.artifacts.delete_task(task_id)
            deleted += len(ids)
        if deleted:
            logger.info("deleted %d expired tasks", deleted)
        return deleted
