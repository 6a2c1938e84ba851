"""`LocalRunner`: the embedded executor. Claims tasks with leases, runs each as a local process.

For every runnable task (non-terminal, no live lease) it takes the worker lease (compare-and-swap),
starts the tool's command, renews the lease while the process runs, and enforces the tool's
maximum run time. Cancellation is cooperative: `tasks/cancel` only records the request; the runner
sees it, sends SIGTERM, waits the grace period, then SIGKILL, and records `cancelled` unless the
tool finished first. After a restart, a task whose lease expired is re-run only if its tool is
idempotent; otherwise it is `failed` with an error saying the outcome is unknown. It also serves
synchronous (non-task) runs for the gateway and sweeps expired tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from aiohttp import web
from mcp_types import jsonrpc

from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.runner.process import ToolProcess
from mcp_tasks.runtime import contract
from mcp_tasks.tasks import results, transitions
from mcp_tasks.tasks.errors import IllegalTransition, LeaseLost, StoreUnavailable, TaskNotFound, VersionConflict
from mcp_tasks.tasks.interfaces import ArtifactStore, Clock, InputNeeded, TaskStore, ToolCatalog, transact
from mcp_tasks.tasks.owner import Owner
from mcp_tasks.tasks.record import TaskRecord
from mcp_tasks.tasks.results import error_result
from mcp_tasks.tasks.tools import ToolSpec
from mcp_tasks.worker.api import create_worker_app
from mcp_tasks.worker.channel import Transition, WorkerChannel
from mcp_tasks.worker.executions import AskedForInput, Execution, ExecutionTable, Finished

logger = logging.getLogger("mcp_tasks.runner")

_OUTCOME_UNKNOWN: Final = (
    "The worker running this task was lost (server restart or crash) and the tool is not declared idempotent, "
    "so the outcome is unknown; check the tool's side effects before calling it again"
)


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


def failing(message: str) -> Transition:
    """A transition to `failed` with a -32603 JSON-RPC error and `message` as the `statusMessage`."""
    error: JsonObject = {"code": jsonrpc.INTERNAL_ERROR, "message": message}
    return lambda record, now: transitions.fail(record, error, message, now)


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
    """

    max_concurrent_tasks: int = 16
    lease_duration_s: float = 30.0
    claim_poll_s: float = 1.0
    sweep_interval_s: float = 30.0
    inline_result_max_bytes: int = 256 * 1024
    artifact_max_bytes: int = 64 * 1024 * 1024
    shutdown_grace_s: float = 5.0


class LocalRunner:
    """The embedded executor; also the gateway's `ToolExecutor` for synchronous calls.

    Use `await start()` and `await aclose()`.
    """

    def __init__(
        self,
        store: TaskStore,
        catalog: ToolCatalog,
        artifacts: ArtifactStore,
        clock: Clock,
        settings: RunnerSettings,
    ) -> None:
        self.store = store
        self.catalog = catalog
        self.artifacts = artifacts
        self.clock = clock
        self.settings = settings
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.executions = ExecutionTable()
        self.channel = WorkerChannel(store, artifacts, clock, settings.inline_result_max_bytes)
        self._supervisors: dict[str, asyncio.Task[None]] = {}
        self._loops: list[asyncio.Task[None]] = []
        self._web_runner: web.AppRunner | None = None
        self._base_url = ""
        self._capacity_freed = asyncio.Event()

    @property
    def _lease(self) -> timedelta:
        return timedelta(seconds=self.settings.lease_duration_s)

    async def start(self) -> None:
        """Serve the worker API on a free loopback port, then start the claim and sweep loops."""
        app = create_worker_app(self.executions, self.channel, self.settings.artifact_max_bytes + 64 * 1024)
        # A tool's long-poll must not hold up shutdown: cancel handlers whose tool is gone, wait ≤1 s.
        self._web_runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0, handler_cancellation=True)
        await self._web_runner.setup()
        site = web.TCPSite(self._web_runner, "127.0.0.1", 0)
        await site.start()
        port = self._web_runner.addresses[0][1]
        self._base_url = f"http://127.0.0.1:{port}/v1/executions"
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
        supervisors = list(self._supervisors.values())
        for supervisor in supervisors:
            supervisor.cancel()
        if supervisors:
            _done, pending = await asyncio.wait(supervisors, timeout=self.settings.shutdown_grace_s + 5)
            for task in pending:
                logger.error("task supervisor %s did not stop in time", task.get_name())
        if self._web_runner is not None:
            await self._web_runner.cleanup()

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
            if len(self._supervisors) < self.settings.max_concurrent_tasks:
                more = self.store.wait_for_new_tasks(self.settings.claim_poll_s)
            else:
                more = asyncio.sleep(self.settings.claim_poll_s)
            await first_of(more, self._capacity_freed.wait())
            self._capacity_freed.clear()

    async def _claim_runnable(self) -> None:
        capacity = self.settings.max_concurrent_tasks - len(self._supervisors)
        if capacity <= 0:
            return
        for record in await self.store.list_runnable(self.clock(), capacity):
            if record.task_id in self._supervisors:
                continue
            claimed = await self._claim(record)
            if claimed is not None:
                self._supervisors[claimed.task_id] = asyncio.create_task(
                    self._supervise(claimed), name=f"task-{claimed.task_id}"
                )

    async def _claim(self, record: TaskRecord) -> TaskRecord | None:
        """Take the lease, applying the restart rules; return the record to run, or None."""
        now = self.clock()
        tool = self.catalog.get_tool(record.tool)
        retention_ms = tool.execution.ttl_ms if tool else record.ttl_ms
        try:
            if record.cancel_requested_at is not None:
                await self.store.compare_and_swap(transitions.cancel(record, now))
                return None
            if tool is None:
                gone = failing(f"Tool {record.tool!r} is no longer declared; the task cannot run")
                await self.store.compare_and_swap(gone(record, now))
                return None
            if record.lease is not None:  # a previous worker held it and is gone
                if not tool.execution.idempotent:
                    await self.store.compare_and_swap(failing(_OUTCOME_UNKNOWN)(record, now))
                    logger.error("task %s lost its worker; failed (outcome unknown)", record.task_id)
                    return None
                logger.warning("task %s lost its worker; re-running (idempotent tool)", record.task_id)
                record = transitions.reset_for_rerun(record, now)
            return await self.store.compare_and_swap(
                transitions.claim(record, self.holder, now, self._lease, retention_ms)
            )
        except (VersionConflict, TaskNotFound, IllegalTransition):
            return None  # another runner moved first

    # ---------------------------------------------------------------- one task

    async def _supervise(self, record: TaskRecord) -> None:
        tool = self.catalog.get_tool(record.tool)
        assert tool is not None  # _claim checked
        execution = Execution(
            tool=tool,
            arguments=record.arguments,
            task_id=record.task_id,
            attempt=record.attempt,
            pre_input_responses=record.pre_input_responses,
        )
        try:
            await self._run_task(record, tool, execution)
        except asyncio.CancelledError:
            raise
        except LeaseLost:
            logger.warning("task %s: lease lost; another worker owns it now", record.task_id)
        except Exception:
            logger.exception("task %s: supervisor failed", record.task_id)
            await self._finish_if_running(record.task_id, failing("Internal error in the runner"))
        finally:
            self._supervisors.pop(record.task_id, None)
            self._capacity_freed.set()

    async def _run_task(self, record: TaskRecord, tool: ToolSpec, execution: Execution) -> None:
        process = ToolProcess(tool, self._contract_env(execution))
        self.executions.add(execution)
        try:
            try:
                await process.start()
            except OSError as exc:
                message = f"cannot start tool {tool.name!r}: {exc.strerror or exc}"
                await self._finish_if_running(record.task_id, failing(message))
                return
            logger.info(
                "task %s: started %s (pid %s, attempt %s)", record.task_id, tool.name, process.pid, record.attempt
            )
            exited = asyncio.create_task(process.wait(), name=f"wait-{record.task_id}")
            try:
                reason = await self._watch(record.task_id, tool, exited)
                await self._conclude(record.task_id, tool, process, execution, reason)
            except asyncio.CancelledError:
                await self._stop_on_shutdown(record.task_id, tool, process)
                raise
            except BaseException:
                await asyncio.shield(process.stop(tool.execution.cancel_grace_seconds))
                raise
            finally:
                if not exited.done():
                    exited.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await exited
        finally:
            self.executions.remove(execution)

    async def _watch(self, task_id: str, tool: ToolSpec, exited: asyncio.Task[int]) -> str:
        """Renew the lease until the process exits, cancel is requested, or the deadline passes.

        While the task store cannot answer (`StoreUnavailable`: disk full, read-only file system) the tool
        keeps running: reads and renewals are retried with back-off (0.1 s doubling up to a third of the
        lease), since nothing else can take the lease over a store that cannot write either.
        """
        deadline = self.clock() + timedelta(seconds=tool.execution.max_run_time_seconds)
        renew_every = self.settings.lease_duration_s / 3
        next_renew = self.clock() + timedelta(seconds=renew_every)
        backoff_s = _STORE_RETRY_FIRST_S
        while True:
            now = self.clock()
            if exited.done():
                return "exited"
            if now >= deadline:
                return "deadline"
            try:
                record = await self.store.get(task_id)
                if record.status.is_terminal:
                    return "finished"
                if record.cancel_requested_at is not None:
                    return "cancel"
                if now >= next_renew:
                    await transact(
                        self.store,
                        task_id,
                        lambda r: (
                            transitions.renew(r, self.holder, self.clock(), self._lease, tool.execution.ttl_ms),
                            None,
                        ),
                    )
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
            until = min(deadline, next_renew) - now
            await first_of(
                self.store.wait_for_change(max(until.total_seconds(), 0.01), task_id), asyncio.shield(exited)
            )

    async def _conclude(
        self, task_id: str, tool: ToolSpec, process: ToolProcess, execution: Execution, reason: str
    ) -> None:
        grace = tool.execution.cancel_grace_seconds
        if reason == "cancel":
            await process.stop(grace)
            logger.info("task %s: cancelled; tool stopped", task_id)
            await self._finish_if_running(task_id, transitions.cancel)
            return
        if reason == "deadline":
            await process.stop(grace)
            message = f"Tool {tool.name!r} exceeded its maximum run time of {tool.execution.max_run_time_seconds:g}s"
            logger.warning("task %s: %s", task_id, message)
            await self._finish_if_running(task_id, failing(message))
            return
        if reason == "finished":
            # The result is recorded; give the tool its grace period to exit by itself.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(grace, 1.0)):
                    await process.wait()
            await process.stop(grace)
            return
        code = await process.wait()
        if execution.outcome.done():
            return
        result = results.exited_without_result(tool.name, code, process.stderr_tail())
        logger.warning("task %s: tool exited with code %s without a result", task_id, code)
        await self._finish_if_running(task_id, lambda r, now: transitions.complete(r, result, now))

    async def _finish_if_running(self, task_id: str, change: Transition) -> None:
        def apply(record: TaskRecord) -> tuple[TaskRecord, None]:
            if record.status.is_terminal:
                return record, None
            return change(record, self.clock()), None

        backoff_s = _STORE_RETRY_FIRST_S
        while True:  # the outcome is known: keep it until the store can take it (or the runner stops)
            try:
                with contextlib.suppress(TaskNotFound):
                    await transact(self.store, task_id, apply)
                return
            except StoreUnavailable as exc:
                logger.warning("task %s: cannot record the outcome yet (%s); retry in %.1fs", task_id, exc, backoff_s)
                await asyncio.sleep(backoff_s)
                backoff_s = min(backoff_s * 2, _STORE_RETRY_MAX_S)

    async def _stop_on_shutdown(self, task_id: str, tool: ToolSpec, process: ToolProcess) -> None:
        """The server is stopping: stop the tool; a non-idempotent task's outcome is now unknown."""
        await asyncio.shield(process.stop(self.settings.shutdown_grace_s))

        def apply(record: TaskRecord) -> tuple[TaskRecord, None]:
            if record.status.is_terminal:
                return record, None
            if tool.execution.idempotent:
                return transitions.reset_for_rerun(record, self.clock()), None
            return failing(_OUTCOME_UNKNOWN)(record, self.clock()), None

        with contextlib.suppress(TaskNotFound, VersionConflict, IllegalTransition):
            await asyncio.shield(transact(self.store, task_id, apply))

    def _contract_env(self, execution: Execution) -> dict[str, str]:
        return {
            contract.ENV_WORKER_URL: f"{self._base_url}/{execution.execution_id}",
            contract.ENV_WORKER_TOKEN: execution.token,
            contract.ENV_TASK_ID: execution.task_id or "",
        }

    # ---------------------------------------------------------------- synchronous runs

    async def run_inline(
        self, tool: ToolSpec, arguments: JsonObject, owner: Owner, pre_input_responses: JsonObject
    ) -> JsonObject:
        """Run a tool synchronously (no task) and return its `CallToolResult` (`ToolExecutor`).

        Raises:
            InputNeeded: the tool asked for input mid-run.
            TimeoutError: it did not finish within `syncTimeoutSeconds`.
        """
        execution = Execution(
            tool=tool, arguments=arguments, task_id=None, pre_input_responses=dict(pre_input_responses)
        )
        process = ToolProcess(tool, self._contract_env(execution))
        grace = tool.execution.cancel_grace_seconds
        self.executions.add(execution)
        try:
            try:
                await process.start()
            except OSError as exc:
                return error_result(f"Cannot start tool {tool.name!r}: {exc.strerror or exc}")
            exited = asyncio.create_task(process.wait(), name=f"inline-{tool.name}")
            try:
                async with asyncio.timeout(tool.execution.sync_timeout_seconds):
                    await first_of(asyncio.shield(exited), asyncio.shield(execution.outcome))
                    if not execution.outcome.done():
                        # Exited first: give a racing result POST a moment, then conclude from the exit.
                        await asyncio.wait({execution.outcome}, timeout=0.05)
                finished = execution.outcome.done() and isinstance(execution.outcome.result(), Finished)
                if finished and not exited.done():
                    # The result is in: let the tool finish its own clean-up, as a task's tool may.
                    await asyncio.wait({exited}, timeout=max(grace, 1.0))
            finally:
                await process.stop(grace)
                exited.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await exited
            if not execution.outcome.done():
                return results.exited_without_result(tool.name, exited.result(), process.stderr_tail())
            outcome = execution.outcome.result()
            if isinstance(outcome, AskedForInput):
                raise InputNeeded(tool.name)
            if outcome.result is not None:
                return outcome.result
            return error_result(str((outcome.error or {}).get("message", "tool failed")))
        finally:
            self.executions.remove(execution)

    # ---------------------------------------------------------------- expiry

    async def _sweep_loop(self) -> None:
        while True:
            try:
                await self.sweep_expired(self.clock())
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
