"""`Reconciler`: brings the cluster in line with each McpTask, and each McpTask in line with its Job.

Level-triggered and idempotent: every entry point re-reads the task and acts on what it finds, so a
handler that runs twice, an event that is missed (the periodic `sweep` catches up) or an operator
restarted mid-run changes nothing twice. Task status changes go through the McpTask store with
compare-and-swap (`tasks.interfaces.transact`) and the domain's transition rules: a task that already
reached a terminal state is never changed again.

- New task → its Secret and Job (409 is success: adopted, never duplicated).
- `spec.cancelRequested` → the Job is deleted with background propagation (pods get SIGTERM and their
  grace period); the task becomes `cancelled` once no pod of it runs, unless it finished first.
- Job `Complete`, or `Failed` with its retries exhausted, without a posted result → `completed` with
  `isError: true`, the exit code and the termination message (`results.exited_without_result`, the same
  outcome as the embedded runner's).
- Job `Failed` otherwise (deadline exceeded, ...) → `failed` with a JSON-RPC error.
- A pod that cannot start within `start_deadline_s` → `failed`, and its Job deleted.
- Expiry: finished tasks past `createdAt + ttlMs` are deleted (Job and Secret go with them through
  their owner references; artifacts explicitly); running tasks keep a `ttlMs` that covers them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any, cast

from kubernetes_asyncio.client import ApiClient, BatchV1Api, CoreV1Api, V1DeleteOptions
from kubernetes_asyncio.client.exceptions import ApiException

from mcp_tasks.observability import metrics, tracing
from mcp_tasks.observability.logs import task_context
from mcp_tasks.operator import observe
from mcp_tasks.operator.events import TaskEvent
from mcp_tasks.operator.jobs import TASK_ID_LABEL, build_job, object_name
from mcp_tasks.operator.settings import OperatorSettings
from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.store.kubernetes import KubernetesTaskStore
from mcp_tasks.tasks import results, transitions
from mcp_tasks.tasks.errors import IllegalTransition, TaskNotFound
from mcp_tasks.tasks.interfaces import ArtifactStore, Clock, ToolCatalog, transact
from mcp_tasks.tasks.record import TaskRecord
from mcp_tasks.tasks.tools import ToolSpec

logger = logging.getLogger("mcp_tasks.operator")

Change = Callable[[TaskRecord, datetime], TaskRecord]
TOOL_RUN_SELECTOR = "app.kubernetes.io/managed-by=mcp-tasks,app.kubernetes.io/component=tool-run"
EXPIRY_BATCH = 1000
"""Expired tasks deleted per batch of a sweep (each batch concurrently; batches until none is left)."""


JOB_LOST = (
    "The Job running this task was deleted before the tool finished, and the tool is not declared idempotent, "
    "so the outcome is unknown; check the tool's side effects before calling it again"
)


def _tail(text: str, limit: int = 700) -> str:
    """The end of a termination message (where a traceback's error line is), marked when cut."""
    text = text.strip()
    return text if len(text) <= limit else "…" + text[-limit:]


class Reconciler:
    """The operator's decisions (see the module docstring).

    Args:
        api: an open kubernetes_asyncio `ApiClient`.
        store: the McpTask store of the namespace.
        catalog: the McpTools of the namespace.
        artifacts: where large results are kept (deleted with their task).
        settings: operator settings.
        clock: UTC clock.
        emit: where Kubernetes Events go (`EventRecorder.emit`; it never blocks). Default: nowhere.
    """

    def __init__(
        self,
        api: ApiClient,
        store: KubernetesTaskStore,
        catalog: ToolCatalog,
        artifacts: ArtifactStore,
        settings: OperatorSettings,
        clock: Clock,
        emit: Callable[[TaskEvent], None] | None = None,
    ) -> None:
        self.emit = emit or (lambda event: None)
        self.batch = BatchV1Api(api)
        self.core = CoreV1Api(api)
        self.store = store
        self.namespace = store.namespace
        self.catalog = catalog
        self.artifacts = artifacts
        self.settings = settings
        self.clock = clock
        self._with_job: set[str] = set()  # tasks whose Job is known to exist (saves a 409 per task event)

    # ------------------------------------------------------------------ task status

    async def _change(self, task_id: str, change: Change, why: str) -> bool:
        """Apply `change` with CAS; False when the task is gone or already terminal (nothing written)."""
        try:
            await transact(self.store, task_id, lambda r: (change(r, self.clock()), None))
        except (IllegalTransition, TaskNotFound):
            return False
        logger.info("task %s: %s", task_id, why)
        return True

    async def _unfinished(self, task_id: str) -> TaskRecord | None:
        """The task if it exists and has not finished (nothing to do for the others)."""
        try:
            record = await self.store.get(task_id)
        except TaskNotFound:
            return None
        return None if record.status.is_terminal else record

    # ------------------------------------------------------------------ McpTask

    async def task_event(self, event: str, task: JsonObject) -> None:
        """An McpTask was added, changed, deleted, or listed at start-up (`event` is the watch event type)."""
        task_id = str(task["metadata"]["name"])
        if event == "DELETED":
            self._with_job.discard(task_id)
            await self.artifacts.delete_task(task_id)
            return
        if task["metadata"].get("deletionTimestamp"):
            return
        record = await self._unfinished(task_id)
        if record is None:
            return
        if record.cancel_requested_at is not None:
            await self.cancel(record)
            return
        await self.ensure_job(task, record)

    async def ensure_job(self, task: JsonObject, record: TaskRecord) -> None:
        """Create the task's Job unless it exists (409: adopt the existing one)."""
        if record.task_id in self._with_job:
            return
        tool = self.catalog.get_tool(record.tool)
        if tool is None:
            await self._change(
                record.task_id,
                transitions.failing(
                    f"Tool {record.tool!r} is no longer declared (its McpTool was deleted); the task cannot run",
                    "ToolRemoved",
                ),
                "failed: tool not declared",
            )
            return
        with tracing.span("mcp.task.job", record.traceparent, {"mcp.tool": tool.name}) as traceparent:
            await self._create_job(record, task, tool, traceparent)

    async def _create_job(self, record: TaskRecord, task: JsonObject, tool: ToolSpec, traceparent: str | None) -> None:
        """Create the task's Job (idempotent: an existing one is kept) and start its attempt."""
        try:
            job = build_job(task, tool, self.settings, traceparent)
        except ValueError as exc:
            await self._change(record.task_id, transitions.failing(str(exc), "InvalidTool"), "failed: no image")
            return
        try:
            await self.batch.create_namespaced_job(self.namespace, cast(Any, job))
        except ApiException as exc:
            if exc.status != 409:
                raise
            self._with_job.add(record.task_id)
            return
        metrics.JOBS_CREATED.inc()
        metrics.RUNS_STARTED.labels(tool.name).inc()
        note = f"Created Job {job['metadata']['name']} to run tool {tool.name} (attempt {record.attempt + 1})"
        self.emit(TaskEvent(record.task_id, "JobCreated", note, action="Create"))
        self._with_job.add(record.task_id)
        await self._change(record.task_id, lambda r, now: transitions.start_attempt(r), "run started")
        logger.info("task %s: created Job %s for tool %s", record.task_id, job["metadata"]["name"], tool.name)

    async def cancel(self, record: TaskRecord, why: str | None = None) -> None:
        """Delete the task's Job (background propagation); record `cancelled` (saying `why`) once no pod runs."""
        if await self._delete_job(record.task_id):
            logger.info("task %s: cancel requested; deleting its Job", record.task_id)
        if not any(observe.is_running(pod) for pod in await self._pods(record.task_id)):
            why = why or (
                "Cancelled at the client's request"
                if record.cancel_requested_by
                else "Cancelled by an administrator (spec.cancelRequested set on the McpTask)"
            )
            await self._change(record.task_id, lambda r, now: transitions.cancel(r, now, why), "cancelled")

    async def _pods(self, task_id: str) -> list[JsonObject]:
        listing: Any = await self.core.list_namespaced_pod(
            self.namespace, label_selector=f"{TASK_ID_LABEL}={task_id}", _preload_content=False
        )
        try:
            items: list[JsonObject] = (await listing.json()).get("items") or []
        finally:
            listing.release()
        return items

    # ------------------------------------------------------------------ Job and Pod

    async def job_event(self, job: JsonObject) -> None:
        """A Job of ours changed: conclude its task when the Job finished without the tool doing so."""
        task_id = (job["metadata"].get("labels") or {}).get(TASK_ID_LABEL)
        if task_id is not None and not job["metadata"].get("deletionTimestamp"):
            self._with_job.add(task_id)
        outcome = observe.job_outcome(job)
        if task_id is None or outcome is None:
            return
        record = await self._unfinished(task_id)
        if record is None:
            return
        if record.cancel_requested_at is not None:
            await self.cancel(record)
            return
        pods = await self._pods(task_id)
        ended = [t for t in (observe.termination(p) for p in pods) if t is not None]
        last = ended[-1] if ended else None
        tool = self.catalog.get_tool(record.tool)
        if outcome.kind == "succeeded" or outcome.reason == "BackoffLimitExceeded":
            # The tool ran and ended without posting a result: the one outcome rule of every executor.
            output = _tail(last.message) if last and last.message else ""
            result = results.exited_without_result(record.tool, last.exit_code if last else None, output)
            await self._change(task_id, lambda r, now: transitions.complete(r, result, now), "ended without result")
            return
        detail = f": {_tail(last.message)}" if last and last.message else ""
        if outcome.reason == "DeadlineExceeded":
            limit = f" of {tool.execution.max_run_time_seconds:g}s" if tool else ""
            message = f"Tool {record.tool!r} exceeded its maximum run time{limit} and was stopped"
            reason = "DeadlineExceeded"
        else:
            message = f"Tool {record.tool!r}: Job failed ({outcome.reason}: {outcome.message}){detail}"
            reason = "JobFailed"
        await self._change(task_id, transitions.failing(message, reason), f"failed: {outcome.reason}")

    async def pod_event(self, event: str, pod: JsonObject) -> None:
        """A pod of ours changed: settle a cancellation, or give up on a pod that cannot start."""
        task_id = (pod["metadata"].get("labels") or {}).get(TASK_ID_LABEL)
        if task_id is None:
            return
        record = await self._unfinished(task_id)
        if record is None:
            return
        if record.cancel_requested_at is not None:
            if event == "DELETED" or not observe.is_running(pod):
                await self.cancel(record)
            return
        await self._check_start(record, pod)

    async def _check_start(self, record: TaskRecord, pod: JsonObject) -> None:
        problem = observe.start_problem(pod)
        if problem is None:
            return
        waited = (self.clock() - observe.created_at(pod)).total_seconds()
        if waited < self.settings.start_deadline_s:
            return
        message = f"The tool's pod could not start within {self.settings.start_deadline_s:g}s ({problem})"
        if await self._change(
            record.task_id, transitions.failing(message, "StartTimeout"), "failed: pod did not start"
        ):
            await self._delete_job(record.task_id)

    async def _enforce_limits(self, record: TaskRecord, job: JsonObject, now: datetime) -> bool:
        """Fail a task past its working time (`maxRunTimeSeconds`, not counting waits for input) or past one
        wait for input (`maxInputWaitSeconds`), and delete its Job; True when it did.
        """
        tool = self.catalog.get_tool(record.tool)
        if tool is None:
            return False
        limits = tool.execution
        if transitions.input_wait_exceeded(record, limits.max_input_wait_seconds, now):
            message = transitions.input_wait_message(record.tool, limits.max_input_wait_seconds)
            change, why = transitions.failing(message, "InputTimeout"), "failed: no answer to its input request"
        elif transitions.run_time_used_s(record, observe.created_at(job), now) >= limits.max_run_time_seconds:
            message = f"Tool {record.tool!r} exceeded its maximum run time of {limits.max_run_time_seconds:g}s"
            change, why = transitions.failing(message, "DeadlineExceeded"), "failed: maximum run time"
        else:
            return False
        if await self._change(record.task_id, change, why):
            await self._delete_job(record.task_id)
        return True

    async def _delete_job(self, task_id: str) -> bool:
        """Delete the task's Job, its pods in the background; False when it was already gone."""
        try:
            await self.batch.delete_namespaced_job(
                object_name(task_id), self.namespace, body=V1DeleteOptions(propagation_policy="Background")
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            return False
        metrics.JOBS_DELETED.inc()
        return True

    # ------------------------------------------------------------------ periodic

    async def expire(self, now: datetime) -> int:
        """Delete every finished task past its TTL, with its artifacts (Jobs and Secrets go by owner
        reference); return how many. Batches of `EXPIRY_BATCH`, each deleted concurrently, until none is
        left, so expiry keeps up with any sustained create rate instead of a fixed number per sweep.
        """
        deleted = 0
        while task_ids := await self.store.delete_expired(now, EXPIRY_BATCH):
            await asyncio.gather(*(self.artifacts.delete_task(task_id) for task_id in task_ids))
            deleted += len(task_ids)
        if deleted:
            logger.info("deleted %d expired tasks", deleted)
        return deleted

    async def sweep(self) -> None:
        """Catch up on anything events missed: expiry, TTL keep-alive, start deadlines, cancellations, lost Jobs."""
        now = self.clock()
        await self.expire(now)
        running = list(await self.store.list_runnable(now, 10_000))  # no leases here: every unfinished task
        if not running:
            return
        jobs = await self._list(self.batch.list_namespaced_job)
        pods = await self._list(self.core.list_namespaced_pod)
        jobs_by_task = {(j["metadata"].get("labels") or {}).get(TASK_ID_LABEL): j for j in jobs}
        pods_by_task: dict[str, list[JsonObject]] = {}
        for pod in pods:
            pods_by_task.setdefault((pod["metadata"].get("labels") or {}).get(TASK_ID_LABEL, ""), []).append(pod)
        for record in running:
            try:
                with task_context(record.task_id, record.tool):
                    await self._sweep_task(record, now, jobs_by_task.get(record.task_id), pods_by_task)
            except Exception:  # one broken task must not stop the sweep of the others
                logger.exception("task %s: sweep failed; will retry", record.task_id)

    async def _sweep_task(
        self, record: TaskRecord, now: datetime, job: JsonObject | None, pods_by_task: dict[str, list[JsonObject]]
    ) -> None:
        await self._keep_alive(record, now)
        if transitions.is_abandoned(record, now):  # a hidden task whose waiting gateway died: stop it
            logger.warning("task %s: its caller is gone; cancelling it", record.task_id)
            await self.cancel(record, transitions.ABANDONED_MESSAGE)  # again each sweep until no pod runs
            return
        if record.cancel_requested_at is not None:
            await self.cancel(record)
            return
        if job is not None:
            if await self._enforce_limits(record, job, now):
                return
            await self.job_event(job)
            for pod in pods_by_task.get(record.task_id, []):
                await self._check_start(record, pod)
            return
        self._with_job.discard(record.task_id)
        if (now - record.created_at).total_seconds() <= self.settings.sweep_interval_s:
            return  # its Job may simply not be listed yet
        if record.attempt > 0:  # it had a Job, which is gone before the task finished
            tool = self.catalog.get_tool(record.tool)
            if tool is None or not tool.execution.idempotent:
                lost = transitions.failing(JOB_LOST, "OutcomeUnknown")
                await self._change(record.task_id, lost, "failed: Job lost, outcome unknown")
                return
            await self._change(record.task_id, transitions.reset_for_rerun, "Job lost; re-running (idempotent)")
            record = await self.store.get(record.task_id)
        task = await self.store.raw(record.task_id)
        if task is not None:
            await self.ensure_job(task, record)

    async def _keep_alive(self, record: TaskRecord, now: datetime) -> None:
        """Keep a running task's `ttlMs` the tool's retention ahead (SEP-2663: ttlMs may change)."""
        tool = self.catalog.get_tool(record.tool)
        retention = tool.execution.ttl_ms if tool else record.ttl_ms
        if record.expires_at - now > timedelta(milliseconds=retention / 2):
            return

        def raise_ttl(r: TaskRecord, at: datetime) -> TaskRecord:
            return transitions.renew_ttl(r, at, retention)

        await self._change(record.task_id, raise_ttl, "ttlMs raised while running")

    async def _list(self, call: Callable[..., Awaitable[Any]]) -> list[JsonObject]:
        response: Any = await call(self.namespace, label_selector=TOOL_RUN_SELECTOR, _preload_content=False)
        try:
            items: list[JsonObject] = (await response.json()).get("items") or []
        finally:
            response.release()
        return items
