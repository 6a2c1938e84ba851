"""Which task a tool pod runs, proven without a Secret per task: a projected ServiceAccount token.

Each Job's pod gets a projected ServiceAccount token with its own audience (`WORKER_TOKEN_AUDIENCE`),
bound by the kubelet to that pod, and presents it to the worker API. The operator asks the API
server who it is (`TokenReview` with that audience: the pod's name and uid come back as claims) and
then follows the owner chain it created itself: that pod, labelled with the task id, controlled by
the Job `mcptask-<taskId>`, which is controlled by the McpTask of that id. Only then is the call the
task's. A verified token is remembered for `VERIFIED_FOR_S`, so a tool's calls cost one review a
minute, not one each. The whole verification is bounded (`REVIEW_TIMEOUT_S`), so a slow API server
refuses a worker call (as for an unknown token) instead of hanging it. The operator needs `create
tokenreviews` (the chart's tokenreview ClusterRole, nothing else cluster-wide) and `get` on pods and
Jobs, and no access to Secrets at all (docs/kubernetes.md).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, cast

from kubernetes_asyncio.client import ApiClient

from mcp_tasks.operator.jobs import WORKER_TOKEN_AUDIENCE, object_name
from mcp_tasks.operator.labels import FIRST_ATTEMPT_ANNOTATION, TASK_ID_LABEL
from mcp_tasks.store.kubernetes import KubernetesTaskStore, client
from mcp_tasks.tasks import transitions
from mcp_tasks.tasks.errors import IllegalTransition, StoreUnavailable, TaskNotFound, VersionConflict
from mcp_tasks.tasks.interfaces import Clock, ToolCatalog, Writer, transact, utc_now
from mcp_tasks.tasks.record import TaskRecord
from mcp_tasks.worker.executions import Execution

logger = logging.getLogger("mcp_tasks.operator")

POD_NAME_CLAIM: Final = "authentication.kubernetes.io/pod-name"
POD_UID_CLAIM: Final = "authentication.kubernetes.io/pod-uid"
VERIFIED_FOR_S: Final = 60.0
"""How long a verified token is believed without another review, in seconds."""
MAX_REMEMBERED: Final = 10_000
"""Verified tokens remembered at most (then the memory starts afresh)."""
REVIEW_TIMEOUT_S: Final = 10.0
"""Longest a token's verification (review, pod, Job, McpTask) may take in all, in seconds."""


def _controller(obj: Any) -> Any:
    return next((ref for ref in obj.metadata.owner_references or [] if ref.controller), None)


@dataclass(frozen=True, slots=True)
class PodRun:
    """Which run of which task a verified pod is.

    Attributes:
        task_id: the task the pod's Job runs.
        run: the task's attempt this pod runs: its Job's first (`FIRST_ATTEMPT_ANNOTATION`, the task's runs
            before the Job plus one) for the Job's first pod; the Job controller starts the next (an
            idempotent tool's Job has a `backoffLimit`) only after one failed, so a live pod runs that plus
            the Job's `status.failed`. `None` for a Job without the annotation (made by an older version).
    """

    task_id: str
    run: int | None


class PodIdentity:
    """Maps a presented token to the task id of the pod it was issued to, or `None`.

    Args:
        api: an API client with the operator's credentials.
        namespace: where the operator's tasks, Jobs and pods live.
        store: the McpTask store (the chain ends at the McpTask's uid).
        timeout_s: longest one token's verification may take in all, in seconds; past it the token is refused.
    """

    def __init__(
        self, api: ApiClient, namespace: str, store: KubernetesTaskStore, timeout_s: float = REVIEW_TIMEOUT_S
    ) -> None:
        self.namespace = namespace
        self.store = store
        self.timeout_s = timeout_s
        self._api = client.Apis(api)
        self._verified: dict[str, tuple[PodRun, float]] = {}

    async def task_of(self, token: str) -> str | None:
        """The task id whose pod holds `token`; `None` for a token that is not one (`run_of`)."""
        found = await self.run_of(token)
        return None if found is None else found.task_id

    async def run_of(self, token: str) -> PodRun | None:
        """The task and run of the pod holding `token`; `None` for a token that is not one (any reason alike,
        also an API server that does not confirm it within `timeout_s` seconds).

        The run is counted when the token is first verified, while its pod lives (a pod's run number never
        changes; a pod deleted since makes its bound token fail the next review, `VERIFIED_FOR_S` later).
        """
        if not token:
            return None
        digest = hashlib.sha256(token.encode()).hexdigest()
        known = self._verified.get(digest)
        if known is not None and known[1] > time.monotonic():
            return known[0]
        try:
            async with asyncio.timeout(self.timeout_s):  # the whole chain, not only each request
                found = await self._review(token)
        except TimeoutError:
            logger.warning("worker API: could not verify a pod's token within %.1f s", self.timeout_s)
            return None
        except (client.ApiError, StoreUnavailable) as exc:
            logger.warning("worker API: could not verify a pod's token (%s)", exc)
            return None
        if found is not None:
            if len(self._verified) >= MAX_REMEMBERED:
                self._verified.clear()
            self._verified[digest] = (found, time.monotonic() + VERIFIED_FOR_S)
        return found

    async def _review(self, token: str) -> PodRun | None:
        review = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token, "audiences": [WORKER_TOKEN_AUDIENCE]},
        }
        answer = await client.call(self._api.auth.create_token_review, cast(Any, review), timeout_s=self.timeout_s)
        status = answer.status
        if not status.authenticated or WORKER_TOKEN_AUDIENCE not in (status.audiences or []):
            return None
        user = status.user
        if not str(user.username or "").startswith(f"system:serviceaccount:{self.namespace}:"):
            return None
        extra = user.extra or {}
        pod_names, pod_uids = extra.get(POD_NAME_CLAIM) or [], extra.get(POD_UID_CLAIM) or []
        if len(pod_names) != 1 or len(pod_uids) != 1:
            return None  # not a pod-bound token
        return await self._chain(str(pod_names[0]), str(pod_uids[0]))

    async def _chain(self, pod_name: str, pod_uid: str) -> PodRun | None:
        """Pod (that uid, labelled with a task) → its controller Job `mcptask-<taskId>` → the McpTask."""
        try:
            pod = await client.call(
                self._api.core.read_namespaced_pod, pod_name, self.namespace, timeout_s=self.timeout_s
            )
        except client.NotFound:
            return None
        task_id = str((pod.metadata.labels or {}).get(TASK_ID_LABEL) or "")
        job_ref = _controller(pod)
        if pod.metadata.uid != pod_uid or not task_id or job_ref is None or job_ref.kind != "Job":
            return None
        if job_ref.name != object_name(task_id):
            return None
        try:
            job = await client.call(
                self._api.batch.read_namespaced_job, job_ref.name, self.namespace, timeout_s=self.timeout_s
            )
        except client.NotFound:
            return None
        task_ref = _controller(job)
        task = await self.store.raw(task_id)
        if job.metadata.uid != job_ref.uid or task_ref is None or task is None:
            return None
        if task_ref.kind != "McpTask" or task_ref.name != task_id or task_ref.uid != task["metadata"]["uid"]:
            return None
        first = (job.metadata.annotations or {}).get(FIRST_ATTEMPT_ANNOTATION)
        if first is None or not str(first).isdigit():
            return PodRun(task_id, None)  # a Job of a version before the annotation: its runs are not counted
        failed = int(getattr(job.status, "failed", None) or 0) if job.status is not None else 0
        return PodRun(task_id, int(first) + failed)


def take_over_for(run: int, clock: Clock = utc_now) -> Callable[[TaskRecord], tuple[TaskRecord, None]]:
    """The change that makes pod run `run` the task's current run, when an earlier one was counted.

    The Job controller starts the next pod of an idempotent tool's Job on its own when one fails (a pod
    deleted by a drain or an eviction, a crash): the lost run's questions and answers are dropped as for
    any re-run (`transitions.reset_for_rerun`; its issued keys stay issued), and the attempt becomes
    `run`, so a write of the earlier pod is superseded (`TaskRecord.superseded`, 409). A task already at
    that run or later, finished, or never counted (`attempt` 0: its first pod) is left as it is.
    """

    def change(record: TaskRecord) -> tuple[TaskRecord, None]:
        if record.status.is_terminal or record.attempt == 0 or record.attempt >= run:
            return record, None
        reset = transitions.reset_for_rerun(record, clock())
        return dataclasses.replace(reset, attempt=run), None

    return change


class TaskExecutions:
    """`ExecutionLookup` for pods: the execution id is the taskId, the token the pod's projected token.

    Args:
        identity: verifies tokens (`PodIdentity`).
        store: the McpTask store (the execution's arguments and pre-task answers come from the task).
        catalog: the McpTools.
    """

    def __init__(self, identity: PodIdentity, store: KubernetesTaskStore, catalog: ToolCatalog) -> None:
        self.identity = identity
        self.store = store
        self.catalog = catalog

    async def _take_over(self, task_id: str, run: int) -> TaskRecord:
        """Make pod run `run` the task's current run (`take_over_for`); the record afterwards.

        Raises:
            StoreUnavailable: the write kept conflicting (the pod retries after a 503).
        """
        try:
            record, _ = await transact(self.store, task_id, take_over_for(run), Writer.EXECUTOR)
        except VersionConflict as exc:
            raise StoreUnavailable(f"task {task_id} is changing too fast to start run {run}; retry") from exc
        logger.info("task %s: run %d of its Job started after the previous run was lost; re-running", task_id, run)
        return record

    async def resolve(self, execution_id: str, token: str) -> Execution | None:
        """The task's execution when `token` belongs to that task's pod, else `None` (all refusals alike)."""
        found = await self.identity.run_of(token)
        if found is None or found.task_id != execution_id:
            return None
        try:
            record = await self.store.get(execution_id)
            if found.run is not None and record.attempt and found.run > record.attempt:  # the Job's next pod
                record = await self._take_over(execution_id, found.run)
        except (TaskNotFound, IllegalTransition):
            return None
        return Execution(
            tool=self.catalog.get_tool(record.tool),
            arguments=record.arguments,
            arguments_ref=record.arguments_ref,
            task_id=record.task_id,
            attempt=max(record.attempt, 1) if found.run is None else found.run,  # a superseded run's writes: 409
            pre_input_responses=dict(record.pre_input_responses),
            execution_id=execution_id,
            token=token,
            traceparent=record.traceparent,
        )
