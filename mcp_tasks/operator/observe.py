"""Reading Jobs and Pods: what happened to a task's run, as the operator decides it. Pure functions.

The Job controller reports `Complete`, or `Failed` (preceded by `FailureTarget`, which the operator
already treats as failing, since a Job waits there until its pods are gone). A pod that cannot start
never fails by itself: it waits (`ImagePullBackOff`, `Unschedulable`, ...) and the operator gives up
after its start deadline.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final, Literal

from mcp_tasks.protocol.errors import JsonObject

STUCK_WAITING_REASONS: Final = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)
"""Container waiting reasons that do not resolve by themselves."""

TERMINATION_MESSAGE_LIMIT: Final = 4096


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """How a Job ended: `succeeded` (Complete) or `failed` (Failed or FailureTarget), with the reason."""

    kind: Literal["succeeded", "failed"]
    reason: str
    message: str


def job_outcome(job: JsonObject) -> JobOutcome | None:
    """The Job's final (or failing) condition, or `None` while it runs."""
    conditions = (job.get("status") or {}).get("conditions") or []
    by_type = {c.get("type"): c for c in conditions if c.get("status") == "True"}
    if "Complete" in by_type:
        return JobOutcome("succeeded", "Complete", str(by_type["Complete"].get("message") or ""))
    for kind in ("Failed", "FailureTarget"):
        if kind in by_type:
            condition = by_type[kind]
            return JobOutcome("failed", str(condition.get("reason") or kind), str(condition.get("message") or ""))
    return None


@dataclass(frozen=True, slots=True)
class Termination:
    """The tool container's end: exit code, termination message (≤ 4096 bytes, the kubelet's limit) and the
    kubelet's reason (`OOMKilled` when the kernel killed it at its memory limit, `Error`, `Completed`; empty
    when the status gives none).
    """

    exit_code: int
    message: str
    reason: str = ""


def termination(pod: JsonObject) -> Termination | None:
    """The first container's `terminated` state, or `None` if it has not terminated."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    for status in statuses:
        terminated = (status.get("state") or {}).get("terminated") or (status.get("lastState") or {}).get("terminated")
        if terminated:
            message = str(terminated.get("message") or "")[:TERMINATION_MESSAGE_LIMIT]
            reason = str(terminated.get("reason") or "")
            return Termination(int(terminated.get("exitCode", -1)), message.strip(), reason)
    return None


def start_problem(pod: JsonObject) -> str | None:
    """Why a pending pod is not starting (`reason: message`), or `None` if nothing is known to be wrong."""
    status = pod.get("status") or {}
    if status.get("phase") not in (None, "Pending"):
        return None
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in STUCK_WAITING_REASONS:
            return f"{waiting['reason']}: {waiting.get('message') or 'the container cannot start'}"
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return f"{condition.get('reason') or 'Unschedulable'}: {condition.get('message') or 'no node fits the pod'}"
    return None


def is_running(pod: JsonObject) -> bool:
    """Tell whether the pod's process may still run (not Succeeded or Failed)."""
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed")


def started_at(pod: JsonObject) -> datetime | None:
    """When the pod's first container started running (`state.running` or `state.terminated` `startedAt`),
    or `None` while it has not (pending: scheduling, pulling its image).
    """
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        state = status.get("state") or {}
        for kind in ("running", "terminated"):
            started = (state.get(kind) or {}).get("startedAt")
            if started:
                return datetime.fromisoformat(str(started).replace("Z", "+00:00"))
    return None


def job_started_at(job: JsonObject) -> datetime | None:
    """When the Job controller last started the Job (`status.startTime`, reset when a suspended Job resumes),
    or `None` before it has.
    """
    started = (job.get("status") or {}).get("startTime")
    return datetime.fromisoformat(str(started).replace("Z", "+00:00")) if started else None


def created_at(obj: JsonObject) -> datetime:
    """`metadata.creationTimestamp` as an aware datetime."""
    return datetime.fromisoformat(str(obj["metadata"]["creationTimestamp"]).replace("Z", "+00:00"))
