"""`Reconciler`: one level-based reconcile per McpTask, fed by a work queue.

Events never carry decisions. A watch event (McpTask, Job, pod), a deadline coming due or the slow
resync only *names* a task (`WorkQueue.add`); a bounded pool of workers (`run_workers`) then runs
`reconcile(task_id)`, which reads the task, its Job and its pods as they are now, asks the pure
`decide.decide` what to do, and applies the plan:

- admission first: a task that never ran gets its Job only once `admission.Admission` admits it (a cap of
  running tasks, per-tenant budgets, fair share); until then `StatusMessage` says why it waits.
- `CreateJob`: create the Job (409 is success: adopted, never duplicated), then count the attempt; a task
  Kueue admits (`operator.kueue`) gets it suspended, labelled with its LocalQueue. A
  create the API server refuses is judged by `refusals.judge`: an admission or validation refusal fails
  the task (`JobRefused`, quoting the API server); a ResourceQuota refusal keeps the task waiting, its
  `statusMessage` and a Warning Event (`QuotaExceeded`) saying why, retried every `QUOTA_RETRY_S` until
  `start_deadline_s` after the task's creation (a re-run: after the first refusal this replica saw), then
  fails it `StartTimeout`.
- `DeleteJob`: delete it with background propagation (pods get SIGTERM and their grace period).
- `Fail`, `Complete`, `Cancel`, `Rerun`, `RenewTtl`, `StatusMessage`: a compare-and-swap write of the task through the
  McpTask store (`tasks.interfaces.transact`) with the domain's transition rules; a task that already
  reached a terminal state is never changed again, and the rest of the plan is dropped.

A plan that rests on an object being absent is decided again on authoritative reads first
(`Plan.confirm`); a plan's `requeue_after_s` (the nearest deadline: start, run time, input wait, TTL
keep-alive) becomes a delayed add of that one task. A reconcile that raises is retried with back-off.

Expiry is separate (`expire`, every `sweep_interval_s`): finished tasks past `createdAt + ttlMs` are
deleted concurrently, with their artifacts (Jobs go by owner reference). A task that is gone has its
artifacts deleted by its next reconcile too (an McpTask deleted with kubectl).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, cast

from kubernetes_asyncio.client import ApiClient, V1DeleteOptions

from mcp_tasks.observability import metrics, tracing
from mcp_tasks.observability.logs import task_context
from mcp_tasks.operator import decide as decisions
from mcp_tasks.operator import kueue, refusals
from mcp_tasks.operator.admission import Admission
from mcp_tasks.operator.children import Children, trim_child
from mcp_tasks.operator.events import TaskEvent
from mcp_tasks.operator.jobs import build_job, object_name
from mcp_tasks.operator.labels import TASK_ID_LABEL, TOOL_RUN_SELECTOR
from mcp_tasks.operator.server_jobs import build_server_job
from mcp_tasks.operator.settings import OperatorSettings
from mcp_tasks.operator.workqueue import ShutDown, WorkQueue
from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.store.kubernetes import KubernetesTaskStore, client
from mcp_tasks.store.kubernetes.watch import list_pages
from mcp_tasks.tasks import transitions
from mcp_tasks.tasks.errors import IllegalTransition, TaskNotFound, VersionConflict
from mcp_tasks.tasks.fair_share import QUEUED_PREFIX
from mcp_tasks.tasks.interfaces import ArtifactStore, Clock, ToolCatalog, Writer, transact
from mcp_tasks.tasks.limits import LimitSettings
from mcp_tasks.tasks.record import TaskRecord
from mcp_tasks.tasks.servers import ServerToolSpec
from mcp_tasks.tasks.tools import ToolSpec

logger = logging.getLogger("mcp_tasks.operator")

Change = Callable[[TaskRecord, datetime], TaskRecord]
EXPIRY_BATCH = 1000
"""Expired tasks deleted per batch (each batch concurrently; batches until none is left)."""
LIST_PAGE_SIZE = 500
"""Jobs or pods per page of the operator's own listings (client-go's default page size)."""
REQUEST_TIMEOUT_S = 30.0
"""Longest an API request of a reconcile may take, in seconds (a hung one would hold its task)."""
QUOTA_RETRY_S = 5.0
"""How often a task whose Job a ResourceQuota refused tries again, in seconds (quota frees as Jobs end)."""


class Reconciler:
    """The operator's reconcile loop (see the module docstring).

    Args:
        api: an open kubernetes_asyncio `ApiClient`.
        store: the McpTask store of the namespace.
        catalog: the McpTools of the namespace.
        artifacts: where large results are kept (deleted with their task).
        settings: operator settings.
        clock: UTC clock.
        emit: where Kubernetes Events go (`EventRecorder.emit`; it never blocks). Default: nowhere.
        limits: the running budgets per tenant and principal (`admission`). Default: none.
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
        limits: LimitSettings | None = None,
    ) -> None:
        self.emit = emit or (lambda event: None)
        apis = client.Apis(api)
        self.batch, self.core = apis.batch, apis.core
        self.store = store
        self.namespace = store.namespace
        self.catalog = catalog
        self.artifacts = artifacts
        self.settings = settings
        self.clock = clock
        self.queue = WorkQueue()
        self.children = Children()
        self.admission = Admission(
            store, self.children, catalog, settings, limits or LimitSettings(), clock, self.queue.add
        )
        self._refused_since: dict[str, datetime] = {}  # task id -> when its Job's quota wait began

    # ------------------------------------------------------------------ the loop

    async def run_workers(self, active: asyncio.Event | None = None) -> None:
        """Run `settings.reconcile_workers` workers until the queue shuts down (or this is cancelled).

        With `active`, a worker takes the next task only while it is set (this replica leads).
        """
        await asyncio.gather(*(self._work(active) for _ in range(self.settings.reconcile_workers)))

    async def _work(self, active: asyncio.Event | None) -> None:
        while True:
            if active is not None:
                await active.wait()
            try:
                task_id = await self.queue.get()
            except ShutDown:
                return
            if active is not None and not active.is_set():  # paused while waiting: the copies are stale now
                self.queue.done(task_id)
                self.queue.add(task_id)  # for whenever this replica leads again (it relists first)
                continue
            started = time.perf_counter()
            outcome = "ok"
            try:
                with task_context(task_id):
                    requeue_after_s = await self.reconcile(task_id)
                self.queue.forget(task_id)
                if requeue_after_s is not None:
                    self.queue.add_after(task_id, requeue_after_s)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                outcome = "error"
                delay = self.queue.retry(task_id)
                failure = f"{type(exc).__name__}: {exc}"
                logger.warning("task %s: reconcile failed (%s); retrying in %.2fs", task_id, failure, delay)
            finally:
                self.queue.done(task_id)
                metrics.RECONCILE_SECONDS.labels(outcome).observe(time.perf_counter() - started)
                metrics.RECONCILE_QUEUE.set(len(self.queue))

    def resync(self) -> int:
        """Queue every unfinished task and every task with a Job or pod here; return how many."""
        task_ids = {*self.store.unfinished_ids(), *self.children.task_ids()}
        for task_id in task_ids:
            self.queue.add(task_id)
        self.admission.wake()
        return len(task_ids)

    async def relist(self) -> None:
        """Replace the copies of Jobs and pods with an authoritative listing, then queue every task (on
        becoming active: the copies of a replica that was paused are stale).
        """
        jobs, jobs_at = await self._list(self.batch.list_namespaced_job, TOOL_RUN_SELECTOR)
        pods, pods_at = await self._list(self.core.list_namespaced_pod, TOOL_RUN_SELECTOR)
        self.children.replace_all(jobs, jobs_at, pods, pods_at)
        self.admission.reset()  # what runs is counted afresh from these listings
        self.resync()

    # ------------------------------------------------------------------ one task

    async def reconcile(self, task_id: str) -> float | None:
        """Bring one task and its Job in line; return when to look again, in seconds (`None`: on change)."""
        if self.store.deleted(task_id):  # seen deleted (expired, or by hand): no read needed
            self._refused_since.pop(task_id, None)
            await self.artifacts.delete_task(task_id)
            self.children.replace(task_id, None, [])
            return None
        try:
            record = await self.store.get(task_id, summary=True)  # decisions read no arguments or result
        except TaskNotFound:
            if await self.store.raw(task_id) is None:  # gone for the API server too, not just unreadable
                await self.artifacts.delete_task(task_id)
                self.children.replace(task_id, None, [])
            return None
        tool = self.catalog.get_tool(record.tool)
        job, pods = self.children.job(task_id), self.children.pods(task_id)
        waiting = self.admission.verdict(record, tool) if job is None else None
        plan = decisions.decide(record, job, pods, tool, self.clock(), self.settings, waiting)
        if plan.confirm:
            try:
                record = await self.store.get(task_id, fresh=True)
            except TaskNotFound:
                return None
            job = await self._read_job(task_id)
            pods, _ = await self._list(self.core.list_namespaced_pod, f"{TASK_ID_LABEL}={task_id}")
            self.children.replace(task_id, job, pods)
            job, pods = self.children.job(task_id), self.children.pods(task_id)
            waiting = self.admission.verdict(record, tool) if job is None else None
            plan = decisions.decide(record, job, pods, tool, self.clock(), self.settings, waiting)
        if record.status.is_terminal:
            self._refused_since.pop(task_id, None)
        current = record
        for action in plan.actions:
            if isinstance(action, decisions.CreateJob):  # always a plan's last action
                assert tool is not None  # decide creates Jobs only for declared tools
                return await self._create_job(current, tool, plan.requeue_after_s)
            applied = await self._apply(current, tool, action)
            if applied is None:
                return None  # the task changed or finished meanwhile: decide again from what it is now
            current = applied
        return plan.requeue_after_s

    async def _apply(self, record: TaskRecord, tool: ToolSpec | None, action: decisions.Action) -> TaskRecord | None:
        """Apply one action to `record`; the record as it is afterwards, or `None` when a status change was
        not written (the task moved on since the decision, or finished): the plan then ends.
        """
        task_id = record.task_id
        match action:
            case decisions.CreateJob():  # applied by `reconcile` itself: its refusal decides when to look again
                return record
            case decisions.DeleteJob():
                if await self._delete_job(task_id):
                    logger.info("task %s: deleted its Job", task_id)
                return record
            case decisions.Fail(message, reason):
                return await self._change(record, transitions.failing(message, reason), f"failed: {reason}")
            case decisions.Complete(result):
                return await self._change(
                    record, lambda r, now: transitions.complete(r, result, now), "ended without result"
                )
            case decisions.Cancel(message):
                return await self._change(record, lambda r, now: transitions.cancel(r, now, message), "cancelled")
            case decisions.Rerun():
                return await self._change(record, transitions.reset_for_rerun, "Job lost; re-running (idempotent)")
            case decisions.RenewTtl(retention_ms):

                def renew(r: TaskRecord, now: datetime) -> TaskRecord:
                    return transitions.renew_ttl(r, now, retention_ms)

                return await self._change(record, renew, "ttlMs raised while running")
            case decisions.CountAttempt():
                return await self._change(record, lambda r, now: transitions.start_attempt(r), "counted its run")
            case decisions.StatusMessage(said):
                return await self._say_queued(record, said)
        return record

    async def _say_queued(self, record: TaskRecord, message: str | None) -> TaskRecord | None:
        """Write why the task waits for a slot (`message`), or clear it (`None`); a `Queued` Event when it
        starts waiting.
        """

        def say(r: TaskRecord, now: datetime) -> TaskRecord:
            return transitions.set_status_message(r, message, now)

        written = await self._change(record, say, "admitted" if message is None else "queued")
        before = record.status_message or ""
        if written is not None and message is not None and not before.startswith(QUEUED_PREFIX):
            self.emit(TaskEvent(record.task_id, "Queued", message, action="Admit", related_job=False))
        return written

    async def _change(self, record: TaskRecord, change: Change, why: str) -> TaskRecord | None:
        """Write `change` of `record` at the version the decision was made on (compare-and-swap, no
        retry on a newer version: a decision holds only for the state it saw); the record written, or
        `None` when the task moved on (it is queued again to be decided afresh), finished, or is gone.
        """
        try:
            updated = change(record, self.clock())
            written = await self.store.compare_and_swap(updated, Writer.EXECUTOR)
        except VersionConflict:
            self.queue.add(record.task_id)  # re-read (the store refreshed its copy) and decide again
            return None
        except (IllegalTransition, TaskNotFound):
            return None
        logger.info("task %s: %s", record.task_id, why)
        return written

    async def _create_job(self, record: TaskRecord, tool: ToolSpec, requeue_after_s: float | None) -> float | None:
        """Create the task's Job (an existing one is kept) and count the attempt; when to look again, in
        seconds (`requeue_after_s`, the plan's; sooner while a quota refuses the Job).

        Raises:
            client.ApiError: a refusal `refusals.judge` does not judge (retried with back-off).
            StoreUnavailable: the API server did not answer.
        """
        task = await self.store.raw(record.task_id)
        if task is None:
            return None
        queue = self.settings.kueue_queue(tool.name, record.owner.tenant)
        with tracing.span("mcp.task.job", record.traceparent, {"mcp.tool": tool.name}) as traceparent:
            try:
                job = (
                    build_server_job(task, tool, self.settings, traceparent)
                    if isinstance(tool, ServerToolSpec)
                    else build_job(task, tool, self.settings, traceparent)
                )
            except ValueError as exc:  # an McpServer tool without the operator's bridge image
                await self._change(record, transitions.failing(str(exc), "InvalidTool"), "its Job cannot be built")
                return None
            if queue is not None:
                kueue.queue_job(job, queue)
            try:
                created = await client.call_json(
                    self.batch.create_namespaced_job, self.namespace, cast(Any, job), timeout_s=REQUEST_TIMEOUT_S
                )
            except client.Conflict:
                existing = await self._read_job(record.task_id)  # adopted: into the copies now, not at
                if existing is not None:  # the next event, so its run is counted at once
                    self.children.job_event("ADDED", existing)
                    self.queue.add(record.task_id)
                return requeue_after_s
            except client.ApiError as exc:
                account = str(job["spec"]["template"]["spec"].get("serviceAccountName") or "default")
                refusal = refusals.judge(exc, tool.name, account)
                if refusal is None:
                    raise
                return await self._refused(record, refusal)
        self._refused_since.pop(record.task_id, None)
        self.children.job_event("ADDED", created)  # seen at once: no "Job lost" while the watch lags
        metrics.JOBS_CREATED.inc()
        metrics.RUNS_STARTED.labels(tool.name).inc()
        note = f"Created Job {job['metadata']['name']} to run tool {tool.name} (attempt {record.attempt + 1})"
        if queue is not None:
            note += f", suspended until Kueue admits it (LocalQueue {queue})"
        self.emit(TaskEvent(record.task_id, "JobCreated", note, action="Create"))
        # A fact, not a decision: count the run on whatever version the task is at now.
        try:
            await transact(self.store, record.task_id, lambda r: (transitions.start_attempt(r), None), Writer.EXECUTOR)
        except (IllegalTransition, TaskNotFound):
            return None
        logger.info("task %s: created Job %s for tool %s", record.task_id, job["metadata"]["name"], tool.name)
        return requeue_after_s

    async def _refused(self, record: TaskRecord, refusal: refusals.Refusal) -> float | None:
        """Act on a judged refusal of the task's Job: fail the task, or (quota) say why it waits and when to
        look again, in seconds, until the start deadline fails it. The failure's Warning Event comes from
        the store's write observer (`events.events_for`); the quota wait's is emitted here.
        """
        task_id = record.task_id
        logger.warning("task %s: the API server refused its Job: %s", task_id, refusal.said)
        if refusal.kind == "refused":
            self._refused_since.pop(task_id, None)
            await self._change(record, transitions.failing(refusal.message, refusals.REFUSED_REASON), "Job refused")
            return None
        now = self.clock()
        since = self._refused_since.setdefault(task_id, record.created_at if record.attempt == 0 else now)
        gives_up_at = since + timedelta(seconds=self.settings.start_deadline_s)
        if now >= gives_up_at:
            self._refused_since.pop(task_id, None)
            message = refusals.quota_timeout(refusal, self.settings.start_deadline_s)
            await self._change(record, transitions.failing(message, "StartTimeout"), "Job refused by quota")
            return None
        self.emit(TaskEvent(task_id, refusals.QUOTA_REASON, refusal.message, "Warning", "Create", related_job=False))
        if record.status_message != refusal.message:

            def waiting(r: TaskRecord, now: datetime) -> TaskRecord:
                return transitions.set_status_message(r, refusal.message, now)

            await self._change(record, waiting, "waiting for quota")
        return min(QUOTA_RETRY_S, max(decisions.MIN_REQUEUE_S, (gives_up_at - now).total_seconds()))

    async def _delete_job(self, task_id: str) -> bool:
        """Delete the task's Job, its pods in the background; False when it was already gone."""
        try:
            await client.call(
                self.batch.delete_namespaced_job,
                object_name(task_id),
                self.namespace,
                body=V1DeleteOptions(propagation_policy="Background"),
                timeout_s=REQUEST_TIMEOUT_S,
            )
        except client.NotFound:
            self.children.forget_job(task_id)  # a copy that outlived its Job
            return False
        metrics.JOBS_DELETED.inc()
        return True

    async def _read_job(self, task_id: str) -> JsonObject | None:
        """The task's Job from the API server (authoritative), or `None`."""
        try:
            return await client.call_json(
                self.batch.read_namespaced_job, object_name(task_id), self.namespace, timeout_s=REQUEST_TIMEOUT_S
            )
        except client.NotFound:
            return None

    async def job_exists(self, task_id: str) -> bool:
        """Whether task `task_id` has a Job: the copy, else an authoritative read (copies lag; a standby has none).

        Raises:
            StoreUnavailable: the API server did not answer within `REQUEST_TIMEOUT_S`.
            client.ApiError: it refused the read (e.g. 403).
        """
        return self.children.job(task_id) is not None or await self._read_job(task_id) is not None

    async def _list(self, call: client.ApiMethod, selector: str) -> tuple[list[JsonObject], str]:
        """One consistent LIST in pages of `LIST_PAGE_SIZE`, each trimmed to what decisions read: the
        items and the listing's resourceVersion.
        """
        items: list[JsonObject] = []
        listed_at = ""
        pages = list_pages(
            call, self.namespace, label_selector=selector, page_size=LIST_PAGE_SIZE, timeout_s=REQUEST_TIMEOUT_S
        )
        async for page in pages:
            items += [trim_child(item) for item in page.get("items") or []]
            listed_at = str((page.get("metadata") or {}).get("resourceVersion") or "")
        return items, listed_at

    # ------------------------------------------------------------------ expiry

    async def expire(self, now: datetime) -> int:
        """Delete every finished task past its TTL, with its artifacts (Jobs go by owner reference);
        return how many. Batches of `EXPIRY_BATCH`, each deleted concurrently, until none is left, so
        expiry keeps up with any sustained create rate instead of a fixed number per pass.
        """
        deleted = 0
        while task_ids := await self.store.delete_expired(now, EXPIRY_BATCH):
            await asyncio.gather(*(self.artifacts.delete_task(task_id) for task_id in task_ids))
            deleted += len(task_ids)
        if deleted:
            logger.info("deleted %d expired tasks", deleted)
        return deleted
