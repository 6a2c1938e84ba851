"""`decide`: what the operator should do about one McpTask, from its current state alone. Pure.

The reconcile contract of controller-runtime: `decide(record, job, pods, tool, now, settings)` looks at
the task, its Job and the Job's pods *as they are now* (never at the event that woke it) and returns a
`Plan`: the actions that bring the cluster and the task in line, and when to look again. Applying a
plan twice, or a plan made from a state that already moved on, is harmless: Job creation is idempotent
(a 409 is success), every task write is compare-and-swap, and a terminal task is never changed again.

What the plan holds, by the state of the task:

- finished `failed`/`cancelled` with its Job still running: `DeleteJob` once `ORPHAN_GRACE_S` passed (a
  crash between the write and the delete must not leave work running); finished otherwise: nothing.
- unfinished with `ttlMs` within half its retention of its end (the tool's `ttlMs`, or a hidden task's
  own), and the last renewal `MIN_RENEWAL_INTERVAL_S` ago: `RenewTtl` first (SEP-2663: ttlMs may
  change); otherwise look again when it will be.
- no Job and held by a warm runner (its tool is warm, or another executor holds a live lease): nothing;
  the operator's warm runner (`operator.warm_tasks`) runs it, renews it and applies the restart rules.
- a Job exists but the task never counted a run: `CountAttempt` first.
- `spec.cancelRequested`, or abandoned (a hidden task nobody watches): `DeleteJob`, then `Cancel` once
  no pod runs (confirmed). This and the limits below are `tasks.deadlines.next_stop`, the stop rule every
  executor shares.
- no Job and never run: `CreateJob` once the operator's admission lets it start (`waiting` is `None`;
  `operator.admission`), else `StatusMessage` saying why it waits, when it does not say so already; or
  `Fail` `ToolRemoved` / `InvalidTool` when it cannot run. A warm tool's task waits the same way.
- a Kueue Job (`operator.kueue`) still suspended: `StatusMessage` that it waits for Kueue, no start
  deadline; once it runs (or our own admission let its Job be created), a `queued: ...` message is cleared.
- no Job but it ran (`attempt ≥ 1`): an idempotent tool gets `Rerun` + `CreateJob` (`Fail` `WorkerLost`
  once it started `transitions.MAX_RUNS` runs), any other `Fail` `OutcomeUnknown` (confirmed).
- waiting for input past `maxInputWaitSeconds`: `Fail` `InputTimeout` + `DeleteJob`.
- working past `maxRunTimeSeconds`, counted from the container's start (waits for input do not count):
  `Fail` `DeadlineExceeded` + `DeleteJob`; otherwise look again when it will be.
- its Job ended without the tool posting a result: `Complete` (`isError`, the exit code and the
  termination message), or `Fail` `DeadlineExceeded` / `JobFailed`.
- a pod that cannot start (`ImagePullBackOff`, unschedulable), or no container started at all: `Fail`
  `StartTimeout` + `DeleteJob` `start_deadline_s` after that pod's (or the Job's) creation; otherwise
  look again then.

A plan that rests on something being *absent* (no Job, no running pod), or that fails a task or waits
on what a copy of its Job or pods says (start deadline, run time counted from the Job's creation, a pod
still stopping), is marked `confirm`: the reconciler decides again on authoritative reads before
acting, so a watch that lags, or a copy that outlived its object, never fails a task.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from mcp_tasks.operator import kueue, observe
from mcp_tasks.operator.settings import OperatorSettings
from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.protocol.models import TaskStatus
from mcp_tasks.tasks import deadlines, results, transitions
from mcp_tasks.tasks.fair_share import QUEUED_PREFIX
from mcp_tasks.tasks.record import TaskRecord
from mcp_tasks.tasks.tools import ToolSpec

ORPHAN_GRACE_S: Final = 30.0
"""How long a `failed`/`cancelled` task's Job may still run before it is deleted, in seconds."""
CANCEL_RECHECK_S: Final = 5.0
"""While a cancelled task's pod still runs, look again this often, in seconds (pod events wake it sooner)."""
MIN_REQUEUE_S: Final = 0.05
MIN_RENEWAL_INTERVAL_S: Final = 30.0
"""Least time between two TTL keep-alive writes of one task, in seconds: a tool with a tiny `ttlMs`
costs one write per 30 s while it runs, never one per reconcile (a running task never expires; the
keep-alive only decides how long it stays readable once finished)."""

JOB_LOST: Final = (
    "The Job running this task was deleted before the tool finished, and the tool is not declared idempotent, "
    "so the outcome is unknown; check the tool's side effects before calling it again"
)
OOM_KILLED: Final = "OOMKilled: the container went past its memory limit (container.resources.limits.memory)"
"""First line of the output a tool killed at its memory limit shows (docs/tool-runtime.md §6)."""
CLIENT_CANCEL: Final = deadlines.CLIENT_CANCEL
ADMIN_CANCEL: Final = deadlines.ADMIN_CANCEL
HELD: Final = ""
"""`waiting` of a task the admission has not placed in its queue yet: no Job, and nothing written (the
admission's next pass wakes the task with its verdict)."""


@dataclass(frozen=True, slots=True)
class CreateJob:
    """Create the task's Job (409: it exists, adopt it), then count the attempt."""


@dataclass(frozen=True, slots=True)
class DeleteJob:
    """Delete the task's Job, its pods in the background (404: already gone)."""


@dataclass(frozen=True, slots=True)
class Fail:
    """Move the task to `failed` with a JSON-RPC error (`transitions.failing`); `reason` is CamelCase."""

    message: str
    reason: str


@dataclass(frozen=True, slots=True)
class Complete:
    """Move the task to `completed` with `result`, a `CallToolResult` (here: the tool ended without one)."""

    result: JsonObject


@dataclass(frozen=True, slots=True)
class Cancel:
    """Move the task to `cancelled`, saying `message`."""

    message: str


@dataclass(frozen=True, slots=True)
class Rerun:
    """Reset an idempotent task whose Job vanished for a fresh run (`transitions.reset_for_rerun`)."""


@dataclass(frozen=True, slots=True)
class RenewTtl:
    """Keep the running task's `ttlMs` `retention_ms` milliseconds ahead of now."""

    retention_ms: int


@dataclass(frozen=True, slots=True)
class StatusMessage:
    """Set the task's `statusMessage`: why it waits for a slot (`queued: ...`), or `None` once it no longer does."""

    message: str | None


@dataclass(frozen=True, slots=True)
class CountAttempt:
    """Count the run of a Job that exists while the task says it never ran (an operator died between
    creating the Job and counting it), so a later loss of that Job is known to have lost a run.
    """


Action = CreateJob | DeleteJob | Fail | Complete | Cancel | Rerun | RenewTtl | CountAttempt | StatusMessage


@dataclass(frozen=True, slots=True)
class Plan:
    """What to do now, in order, and when to decide again.

    Attributes:
        actions: applied in order; a status change that finds the task finished ends the plan.
        requeue_after_s: reconcile this task again after this many seconds (the nearest deadline);
            `None`: only when something about it changes (or at the slow resync).
        confirm: the plan rests on an object being absent; decide again on authoritative reads first.
    """

    actions: tuple[Action, ...] = ()
    requeue_after_s: float | None = None
    confirm: bool = False


def decide(
    record: TaskRecord,
    job: JsonObject | None,
    pods: list[JsonObject],
    tool: ToolSpec | None,
    now: datetime,
    settings: OperatorSettings,
    waiting: str | None = None,
) -> Plan:
    """The plan for one McpTask (see the module table).

    Args:
        record: the task as stored now.
        job: its Job (`mcptask-<taskId>`), or `None` when there is none.
        pods: the Job's pods (any order).
        tool: the task's tool as declared now, or `None` when its McpTool is gone.
        now: the current UTC time.
        settings: the operator's settings (`start_deadline_s`).
        waiting: for a task that has not run: `None` when it may start now, else the `statusMessage` it
            waits for a slot with (`admission.Admission.verdict`; `HELD`: not placed yet, write nothing).
    """
    if record.status.is_terminal:
        return _finished(record, job, now)
    if job is None and _warm_held(record, tool, now):
        live = record.lease is not None and record.lease.expires_at > now
        queued = () if live or record.attempt else _queued(record, waiting)
        return Plan(queued, _after([record.lease.expires_at] if live and record.lease else [], now))
    due: list[datetime] = []
    first: tuple[Action, ...] = ()
    retention_ms = tool.execution.ttl_ms if tool is not None else record.ttl_ms
    if record.retention_ms is not None:  # a hidden task is kept shorter than its tool's ttlMs
        retention_ms = min(retention_ms, record.retention_ms)
    renew_at = record.expires_at - timedelta(milliseconds=retention_ms / 2)
    renewed_at = record.expires_at - timedelta(milliseconds=retention_ms)  # when the last renewal was made
    if renewed_at > record.created_at:  # renewed before: not again within the interval
        renew_at = max(renew_at, renewed_at + timedelta(seconds=MIN_RENEWAL_INTERVAL_S))
    if now >= renew_at:
        first = (RenewTtl(retention_ms),)
    else:
        due.append(renew_at)

    started_at, start_deadline, not_started = _run_start(job, pods, settings)
    limits = tool.execution if tool is not None else None
    run = deadlines.RunFacts(started_at=started_at, start_deadline=start_deadline)
    stop = deadlines.next_stop(record, now, limits, run)
    if stop is deadlines.Stop.CANCEL or stop is deadlines.Stop.ABANDONED:
        return _cancelling(job, pods, deadlines.verdict(stop, record, limits), first)
    if job is None:
        return _without_job(record, tool, first, waiting)
    if _deleting(job):
        return Plan(first, _after(due, now))  # deleted by someone else: its DELETED event wakes us
    if record.attempt == 0:
        first = (*first, CountAttempt())
    queue = kueue.queue_of(job)
    if queue is not None and kueue.suspended(job):  # Kueue has not admitted it (or evicted it): no deadline
        return Plan((*first, *_queued(record, kueue.waiting_message(queue))), _after(due, now))
    if record.status_message is not None and record.status_message.startswith(QUEUED_PREFIX):
        first = (*first, StatusMessage(None))  # admitted: it no longer waits
    if stop is deadlines.Stop.INPUT_TIMEOUT:
        ending = deadlines.verdict(stop, record, limits)
        return Plan((*first, Fail(ending.message, ending.reason), DeleteJob()))
    if stop is deadlines.Stop.DEADLINE:  # counted from this Job's creation: confirm it is this Job
        ending = deadlines.verdict(stop, record, limits)
        return Plan((*first, Fail(ending.message, ending.reason), DeleteJob()), confirm=True)

    outcome = observe.job_outcome(job)
    if outcome is not None:
        return Plan((*first, _ended(record, tool, outcome, pods)))
    if stop is deadlines.Stop.START_TIMEOUT:  # what the copies of its pods say: confirm on fresh reads
        ending = deadlines.verdict(stop, record, limits, not_started)
        return Plan((*first, Fail(ending.message, ending.reason), DeleteJob()), confirm=True)
    if isinstance(stop, datetime):
        due.append(stop)
    return Plan(first, _after(due, now))


def _run_start(
    job: JsonObject | None, pods: list[JsonObject], settings: OperatorSettings
) -> tuple[datetime | None, datetime | None, str]:
    """When the run's working time began (its first pod's container start; `None` before), when a run
    that has not started gives up, and the sentence saying why.

    Time before the container runs (scheduling, pulling the image) is not `maxRunTimeSeconds`' to count:
    `start_deadline_s` bounds it, from the Job's creation, or from a pod's that is known not to start
    (`ImagePullBackOff`, unschedulable).
    """
    if job is None:
        return None, None, ""
    started = [moment for moment in (observe.started_at(pod) for pod in pods) if moment is not None]
    if started:
        return min(started), *_start_deadline(pods, settings)
    if kueue.queue_of(job) is not None and kueue.suspended(job):
        return None, None, ""  # waiting in Kueue's queue is not starting: no deadline while it lasts
    gives_up_at, message = _start_deadline(pods, settings)
    if gives_up_at is None:
        since = observe.created_at(job)
        if kueue.queue_of(job) is not None:  # admitted by Kueue: from when it let the Job start
            since = observe.job_started_at(job) or since
        gives_up_at = since + timedelta(seconds=settings.start_deadline_s)
        message = f"The tool's pod did not start within {settings.start_deadline_s:g}s of its Job's creation"
    return None, gives_up_at, message


def _start_deadline(pods: list[JsonObject], settings: OperatorSettings) -> tuple[datetime | None, str]:
    """When the first of the Job's pods that cannot start (`ImagePullBackOff`, unschedulable) gives up,
    and the sentence saying so; `(None, "")` when every pod started or may still.
    """
    earliest: tuple[datetime | None, str] = (None, "")
    for pod in pods:
        problem = observe.start_problem(pod)
        if problem is None:
            continue
        gives_up_at = observe.created_at(pod) + timedelta(seconds=settings.start_deadline_s)
        if earliest[0] is None or gives_up_at < earliest[0]:
            message = f"The tool's pod could not start within {settings.start_deadline_s:g}s ({problem})"
            earliest = (gives_up_at, message)
    return earliest


def _finished(record: TaskRecord, job: JsonObject | None, now: datetime) -> Plan:
    stopped_by_us = record.status in (TaskStatus.FAILED, TaskStatus.CANCELLED)
    if not stopped_by_us or job is None or _deleting(job) or observe.job_outcome(job) is not None:
        return Plan()
    since_s = (now - record.last_updated_at).total_seconds()
    if since_s >= ORPHAN_GRACE_S:
        return Plan((DeleteJob(),))
    return Plan(requeue_after_s=max(MIN_REQUEUE_S, ORPHAN_GRACE_S - since_s))


def _cancelling(
    job: JsonObject | None, pods: list[JsonObject], ending: deadlines.Verdict, first: tuple[Action, ...]
) -> Plan:
    steps: list[Action] = list(first)
    if job is not None and not _deleting(job):
        steps.append(DeleteJob())
    if any(observe.is_running(pod) for pod in pods):
        # the pod got SIGTERM and may still finish first; look again, at the pods themselves
        return Plan(tuple(steps), CANCEL_RECHECK_S, confirm=True)
    return Plan((*steps, Cancel(ending.message)), confirm=True)


def _queued(record: TaskRecord, waiting: str | None) -> tuple[Action, ...]:
    """The write that makes a waiting task say why it waits, unless it says so already (or nothing to say)."""
    if not waiting or record.status_message == waiting:
        return ()
    return (StatusMessage(waiting),)


def _without_job(
    record: TaskRecord, tool: ToolSpec | None, first: tuple[Action, ...], waiting: str | None = None
) -> Plan:
    if record.attempt == 0:
        if tool is None:
            message = f"Tool {record.tool!r} is no longer declared (its McpTool was deleted); the task cannot run"
            return Plan((*first, Fail(message, "ToolRemoved")))
        if not tool.manifest.container.image:
            message = f"tool {tool.name!r} declares no container.image; it cannot run on Kubernetes"
            return Plan((*first, Fail(message, "InvalidTool")))
        if waiting is not None:  # the admission holds it: the pass that admits it wakes it
            return Plan((*first, *_queued(record, waiting)))
        return Plan((*first, CreateJob()))
    # It had a Job, which is gone before the task finished (deleted by hand, or garbage-collected).
    if tool is not None and tool.execution.idempotent:
        if record.attempt >= transitions.MAX_RUNS:  # every re-run, whatever lost it, counts against one cap
            message = transitions.runs_exhausted_message(record, "its Job was deleted")
            return Plan((*first, Fail(message, "WorkerLost")), confirm=True)
        return Plan((*first, Rerun(), CreateJob()), confirm=True)
    return Plan((*first, Fail(JOB_LOST, "OutcomeUnknown")), confirm=True)


def _ended(record: TaskRecord, tool: ToolSpec | None, outcome: observe.JobOutcome, pods: list[JsonObject]) -> Action:
    """The task's end when its Job finished but the tool never posted a result."""
    ended = [t for t in (observe.termination(p) for p in sorted(pods, key=_created)) if t is not None]
    last = ended[-1] if ended else None
    if outcome.kind == "succeeded" or outcome.reason == "BackoffLimitExceeded":
        # The tool ran and ended without posting a result: the one outcome rule of every executor.
        output = tail(last.message) if last and last.message else ""
        if last and last.reason == "OOMKilled":  # the kubelet's word for it, so `kubectl describe` shows it
            output = f"{OOM_KILLED}\n{output}".strip()
        return Complete(results.exited_without_result(record.tool, last.exit_code if last else None, output))
    if outcome.reason == "DeadlineExceeded":
        limit = f" of {tool.execution.max_run_time_seconds:g}s" if tool else ""
        return Fail(f"Tool {record.tool!r} exceeded its maximum run time{limit} and was stopped", "DeadlineExceeded")
    detail = f": {tail(last.message)}" if last and last.message else ""
    return Fail(f"Tool {record.tool!r}: Job failed ({outcome.reason}: {outcome.message}){detail}", "JobFailed")


def tail(text: str, limit: int = 700) -> str:
    """The end of a termination message (where a traceback's error line is), marked when cut."""
    text = text.strip()
    return text if len(text) <= limit else "…" + text[-limit:]


def _deleting(obj: JsonObject) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


def _created(pod: JsonObject) -> str:
    return str(pod["metadata"].get("creationTimestamp") or "")


def _warm_held(record: TaskRecord, tool: ToolSpec | None, now: datetime) -> bool:
    """Whether a task without a Job is the warm runner's: its tool is warm, or a live lease holds it
    (a run that started warm keeps its executor if its McpTool stops being warm; an expired lease of a
    tool no longer warm is a lost run, decided below like a lost Job).
    """
    if record.lease is not None:
        return record.lease.expires_at > now or (tool is not None and tool.warm is not None)
    return tool is not None and tool.warm is not None


def _after(deadlines: list[datetime], now: datetime) -> float | None:
    if not deadlines:
        return None
    return max(MIN_REQUEUE_S, (min(deadlines) - now).total_seconds())
