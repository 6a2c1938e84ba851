"""One rule for when a task's run must stop, shared by every executor. Pure: no I/O, no clock of its own.

The embedded runner's supervisor (`runner.supervision`), the operator's `decide` (Job-run tasks) and the
operator's warm-task runner all ask `next_stop` the same question about a task they run — must it stop now,
and if not, when to look again — and turn a `Stop` into the same outcome with `verdict`. Callers must not
re-implement any of these tests: a rule changed here changes in every deployment.

The stops, in the order they are tested (the first that applies wins):

| `Stop`          | when                                                            | outcome                    |
|-----------------|-----------------------------------------------------------------|----------------------------|
| `CANCEL`        | `tasks/cancel` (or `spec.cancelRequested`) was recorded          | `cancelled`                |
| `ABANDONED`     | a hidden task's caller stopped renewing `watched_until`         | `cancelled` (nobody reads) |
| `START_TIMEOUT` | the run has not started by its start deadline                   | `failed` `StartTimeout`    |
| `INPUT_TIMEOUT` | one wait for input lasted over `maxInputWaitSeconds`            | `failed` `InputTimeout`    |
| `DEADLINE`      | working time (input waits excluded) reached `maxRunTimeSeconds` | `failed` `DeadlineExceeded`|
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final, Literal, assert_never

from mcp_tasks.protocol.models import TaskStatus
from mcp_tasks.tasks import transitions
from mcp_tasks.tasks.record import TaskRecord
from mcp_tasks.tasks.tools import ExecutionSpec


class Stop(enum.StrEnum):
    """Why a run must stop now (see the module table)."""

    CANCEL = "cancel"
    ABANDONED = "abandoned"
    START_TIMEOUT = "start-timeout"
    INPUT_TIMEOUT = "input-timeout"
    DEADLINE = "deadline"


INPUT_WAIT_SLACK: Final = timedelta(milliseconds=1)
"""`transitions.input_wait_exceeded` is strict (>): look again this long after the limit."""

CLIENT_CANCEL: Final = "Cancelled at the client's request"
ADMIN_CANCEL: Final = "Cancelled by an administrator (spec.cancelRequested set on the McpTask)"


@dataclass(frozen=True, slots=True)
class RunFacts:
    """What the executor knows of the task's current run.

    Attributes:
        started_at: when this run's working time began (process start, Job creation, warm call sent),
            UTC; `None` while it has not started (waiting for a warm slot, a pod not scheduled yet).
        waited_before_ms: the task's `input_wait_ms` when this run started, in milliseconds (earlier runs'
            waits are not this run's).
        start_deadline: when a run that has not started (or whose pod cannot start) gives up, UTC; `None`:
            no start deadline.
    """

    started_at: datetime | None
    waited_before_ms: int = 0
    start_deadline: datetime | None = None


def next_stop(record: TaskRecord, now: datetime, limits: ExecutionSpec | None, run: RunFacts) -> Stop | datetime | None:
    """Whether the unfinished task's run must stop at `now`, and if not, when to ask again.

    Args:
        record: the task as stored now (not terminal; a terminal task has nothing to stop).
        now: the current time, UTC.
        limits: the tool's `execution` limits as declared now; `None` when its tool is gone (only cancel
            and abandonment then apply).
        run: the facts of the current run.

    Returns:
        A `Stop` due now; else the earliest moment (UTC) one may become due (an input-wait or run-time
        limit, a start deadline, the caller's `watched_until`); `None` when nothing can become due by
        time alone (only a write to the task can change the answer).
    """
    if record.cancel_requested_at is not None:
        return Stop.CANCEL
    if transitions.is_abandoned(record, now):
        return Stop.ABANDONED
    due: list[datetime] = [] if record.watched_until is None else [record.watched_until]
    if run.started_at is None:
        if run.start_deadline is not None:
            if now >= run.start_deadline:
                return Stop.START_TIMEOUT
            due.append(run.start_deadline)
        return min(due, default=None)
    if limits is not None:
        if transitions.input_wait_exceeded(record, limits.max_input_wait_seconds, now):
            return Stop.INPUT_TIMEOUT
        used_s = transitions.run_time_used_s(record, run.started_at, now, run.waited_before_ms)
        if used_s >= limits.max_run_time_seconds:
            return Stop.DEADLINE
        if record.status is TaskStatus.INPUT_REQUIRED and record.input_required_since is not None:
            waited_enough = timedelta(seconds=limits.max_input_wait_seconds) + INPUT_WAIT_SLACK
            due.append(record.input_required_since + waited_enough)  # working time stands still meanwhile
        else:
            due.append(now + timedelta(seconds=limits.max_run_time_seconds - used_s))
    if run.start_deadline is not None:
        if now >= run.start_deadline:
            return Stop.START_TIMEOUT
        due.append(run.start_deadline)
    return min(due, default=None)


@dataclass(frozen=True, slots=True)
class Verdict:
    """How a stopped task ends: `cancelled` with `message`, or `failed` with `message` and a CamelCase
    `reason` (the JSON-RPC error's `data.reason`, the McpTask's `Finished` condition reason).
    """

    status: Literal[TaskStatus.CANCELLED, TaskStatus.FAILED]
    message: str
    reason: str = ""

    def apply(self, record: TaskRecord, now: datetime) -> TaskRecord:
        """The terminal record (`transitions.cancel` or `transitions.failing`).

        Raises:
            IllegalTransition: the task is already terminal.
        """
        if self.status is TaskStatus.CANCELLED:
            return transitions.cancel(record, now, self.message)
        return transitions.failing(self.message, self.reason)(record, now)


def verdict(stop: Stop, record: TaskRecord, limits: ExecutionSpec | None, not_started: str = "") -> Verdict:
    """The outcome of a run stopped for `stop`: one message per stop, whatever the executor.

    Args:
        stop: from `next_stop`.
        record: the task (its tool name, who asked to cancel).
        limits: the tool's limits (named in the messages); `None` when its tool is gone.
        not_started: for `START_TIMEOUT`, the executor's sentence on what never started and why (a pod in
            `ImagePullBackOff`, no free warm worker); a generic one when empty.
    """
    match stop:
        case Stop.CANCEL:
            message = CLIENT_CANCEL if record.cancel_requested_by else ADMIN_CANCEL
            return Verdict(TaskStatus.CANCELLED, message)
        case Stop.ABANDONED:
            return Verdict(TaskStatus.CANCELLED, transitions.ABANDONED_MESSAGE)
        case Stop.START_TIMEOUT:
            message = not_started or f"Tool {record.tool!r} could not start in time"
            return Verdict(TaskStatus.FAILED, message, "StartTimeout")
        case Stop.INPUT_TIMEOUT:
            wait_s = limits.max_input_wait_seconds if limits is not None else 0.0
            return Verdict(TaskStatus.FAILED, transitions.input_wait_message(record.tool, wait_s), "InputTimeout")
        case Stop.DEADLINE:
            limit = f" of {limits.max_run_time_seconds:g}s" if limits is not None else ""
            return Verdict(
                TaskStatus.FAILED, f"Tool {record.tool!r} exceeded its maximum run time{limit}", "DeadlineExceeded"
            )
        case _:
            assert_never(stop)
