"""`Children`: the operator's copy of the Jobs and pods it runs tasks in, by task id, trimmed.

Fed by the watch (kopf's Job and Pod events) and by the reconciler's own authoritative reads; read by
`decide`. Only the fields `decide` and `observe` read are kept (names, times, labels, conditions,
container states), so a Job or pod costs a few hundred bytes here, not the full object (managed
fields, the pod spec and its environment). A late event never rolls a newer copy back: copies are
compared by `resourceVersion`, as the task store does.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mcp_tasks.operator.kueue import QUEUE_NAME_LABEL
from mcp_tasks.operator.labels import TASK_ID_LABEL
from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.store.kubernetes.watch import newer_version

_METADATA = ("name", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp")
_JOB_STATUS = ("conditions", "active", "failed", "succeeded", "startTime")
_POD_STATUS = ("phase", "conditions", "containerStatuses")


def task_of(obj: JsonObject) -> str | None:
    """The task id a Job or pod of a tool run is labelled with, or `None`."""
    value = ((obj.get("metadata") or {}).get("labels") or {}).get(TASK_ID_LABEL)
    return None if value is None else str(value)


def trim(obj: JsonObject, status_fields: tuple[str, ...]) -> JsonObject:
    """The parts of a Job or pod the operator's decisions read (metadata names and times, `status`; a Kueue
    Job's LocalQueue label and `spec.suspend`).
    """
    metadata = obj.get("metadata") or {}
    kept: dict[str, Any] = {key: metadata[key] for key in _METADATA if metadata.get(key) is not None}
    labels = metadata.get("labels") or {}
    kept["labels"] = {TASK_ID_LABEL: task_of(obj)}
    if QUEUE_NAME_LABEL in labels:
        kept["labels"][QUEUE_NAME_LABEL] = labels[QUEUE_NAME_LABEL]
    status = obj.get("status") or {}
    trimmed: dict[str, Any] = {"metadata": kept, "status": {key: status[key] for key in status_fields if key in status}}
    if (obj.get("spec") or {}).get("suspend"):
        trimmed["spec"] = {"suspend": True}
    return trimmed


def trim_child(obj: JsonObject) -> JsonObject:
    """`trim` for a Job or a pod from a listing (whose items carry no `kind`)."""
    return trim(obj, (*_JOB_STATUS, "phase", "containerStatuses"))


def _newer(candidate: JsonObject, current: JsonObject | None) -> bool:
    if current is None:
        return True
    return newer_version(
        str(candidate["metadata"].get("resourceVersion")), str(current["metadata"].get("resourceVersion"))
    )


class Children:
    """The tool-run Jobs and pods of one namespace, by task id (see the module docstring)."""

    def __init__(self) -> None:
        self._jobs: dict[str, JsonObject] = {}
        self._pods: dict[str, dict[str, JsonObject]] = {}

    def job(self, task_id: str) -> JsonObject | None:
        """The task's Job as last seen, or `None`."""
        return self._jobs.get(task_id)

    def pods(self, task_id: str) -> list[JsonObject]:
        """The task's pods as last seen."""
        return list(self._pods.get(task_id, {}).values())

    def task_ids(self) -> set[str]:
        """Every task id that has a Job or a pod here."""
        return {*self._jobs, *self._pods}

    def __len__(self) -> int:
        """Jobs plus pods held."""
        return len(self._jobs) + sum(len(pods) for pods in self._pods.values())

    def job_event(self, kind: str, job: JsonObject) -> str | None:
        """Record a Job watch event (`ADDED`/`MODIFIED`/`DELETED`, or `None` for a listing); its task id."""
        task_id = task_of(job)
        if task_id is None:
            return None
        if kind == "DELETED":
            current = self._jobs.get(task_id)
            if current is None or current["metadata"].get("uid") == job["metadata"].get("uid"):
                self._jobs.pop(task_id, None)
        elif _newer(job, self._jobs.get(task_id)):
            self._jobs[task_id] = trim(job, _JOB_STATUS)
        return task_id

    def forget_job(self, task_id: str) -> None:
        """Drop the copy of the task's Job (the API server says it is gone)."""
        self._jobs.pop(task_id, None)

    def pod_event(self, kind: str, pod: JsonObject) -> str | None:
        """Record a pod watch event (as `job_event`); its task id."""
        task_id = task_of(pod)
        if task_id is None:
            return None
        name = str(pod["metadata"].get("name"))
        pods = self._pods.setdefault(task_id, {})
        if kind == "DELETED":
            pods.pop(name, None)
        elif _newer(pod, pods.get(name)):
            pods[name] = trim(pod, _POD_STATUS)
        if not pods:
            del self._pods[task_id]
        return task_id

    def replace(self, task_id: str, job: JsonObject | None, pods: Iterable[JsonObject]) -> None:
        """Set what an authoritative read found for one task (its Job or none, and its pods)."""
        if job is None:
            self._jobs.pop(task_id, None)
        else:
            self._jobs[task_id] = trim(job, _JOB_STATUS)
        fresh = {str(pod["metadata"].get("name")): trim(pod, _POD_STATUS) for pod in pods}
        if fresh:
            self._pods[task_id] = fresh
        else:
            self._pods.pop(task_id, None)

    def replace_all(self, jobs: Iterable[JsonObject], jobs_at: str, pods: Iterable[JsonObject], pods_at: str) -> None:
        """Merge authoritative listings of the namespace's Jobs and pods, taken at resourceVersions
        `jobs_at` and `pods_at` (on becoming the leader): newer copies win, and a copy a listing
        lacks is dropped unless it is newer than that listing (the watch saw it after it was taken).
        """
        jobs, pods = list(jobs), list(pods)
        for job in jobs:
            self.job_event("ADDED", job)
        for pod in pods:
            self.pod_event("ADDED", pod)
        listing = {"metadata": {"resourceVersion": jobs_at}}
        listed_jobs = {task_of(job) for job in jobs}
        for task_id, job in list(self._jobs.items()):
            if task_id not in listed_jobs and not _newer(job, listing):
                del self._jobs[task_id]
        listing = {"metadata": {"resourceVersion": pods_at}}
        listed_pods = {(task_of(pod), str(pod["metadata"].get("name"))) for pod in pods}
        for task_id, by_name in list(self._pods.items()):
            for name, pod in list(by_name.items()):
                if (task_id, name) not in listed_pods and not _newer(pod, listing):
                    del by_name[name]
            if not by_name:
                del self._pods[task_id]
