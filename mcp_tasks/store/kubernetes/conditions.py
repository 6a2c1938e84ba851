"""`status.conditions` of an McpTask, derived from the task record (Kubernetes API conventions).

Three condition types, so `kubectl wait --for=condition=Finished mcptask/<taskId>` and dashboards built
on conditions work:

- `Started`: `True` once a run of the tool began (`attempt` ≥ 1); reason `RunStarted` / `NotStarted`.
- `InputRequired`: `True` while the task waits for input; reason `InputRequested` / `NoPendingInput`.
- `Finished`: `True` once the task is terminal; reason `Completed`, `ToolError` (completed with
  `isError: true`), `Cancelled`, `Failed`, or the `reason` a failure's `error.data` names (e.g.
  `StartTimeout`, `OutcomeUnknown`); `Running` until then. Its message is the final `statusMessage`.

Pure: computed from the record and the previous conditions inside the store's one status write per
transition (no extra write). `lastTransitionTime` moves only when a condition's status changes, and
every condition carries the McpTask's `metadata.generation` as `observedGeneration`. No I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from mcp_tasks.protocol.models import TaskStatus
from mcp_tasks.store.kubernetes.resources import TaskCondition
from mcp_tasks.tasks.record import TaskRecord, iso_ms

CONDITION_STARTED: Final = "Started"
CONDITION_INPUT_REQUIRED: Final = "InputRequired"
CONDITION_FINISHED: Final = "Finished"
CONDITION_TYPES: Final = (CONDITION_STARTED, CONDITION_INPUT_REQUIRED, CONDITION_FINISHED)

MESSAGE_LIMIT: Final = 1000
"""Longest condition message written, in characters (the API allows 32768; a line in `describe`)."""


def _short(message: str | None) -> str:
    text = " ".join((message or "").split())
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 1] + "…"


def desired(record: TaskRecord) -> list[tuple[str, str, str, str]]:
    """`(type, status, reason, message)` of each condition for `record`, in `CONDITION_TYPES` order."""
    started = record.attempt >= 1 or record.status.is_terminal
    waiting = record.status is TaskStatus.INPUT_REQUIRED
    keys = ", ".join(sorted(record.input_requests))
    finished = record.status.is_terminal
    return [
        (
            CONDITION_STARTED,
            "True" if started else "False",
            "RunStarted" if started else "NotStarted",
            f"run {record.attempt} of the tool began" if record.attempt >= 1 else "",
        ),
        (
            CONDITION_INPUT_REQUIRED,
            "True" if waiting else "False",
            "InputRequested" if waiting else "NoPendingInput",
            f"waiting for input: {keys}" if waiting else "",
        ),
        (
            CONDITION_FINISHED,
            "True" if finished else "False",
            record.finished_reason if finished else "Running",
            _short(record.status_message) if finished else "",
        ),
    ]


def task_conditions(record: TaskRecord, previous: Sequence[TaskCondition], generation: int) -> list[TaskCondition]:
    """The conditions to write with `record`'s status, keeping `lastTransitionTime` of unchanged ones.

    Args:
        record: the task as it is being written.
        previous: the conditions the McpTask holds now (any order; unknown types are dropped).
        generation: the McpTask's `metadata.generation`, recorded as `observedGeneration`.
    """
    before = {condition.type: condition for condition in previous}
    now = iso_ms(record.last_updated_at)
    conditions = []
    for kind, status, reason, message in desired(record):
        old = before.get(kind)
        since = old.last_transition_time if old is not None and old.status == status else now
        conditions.append(
            TaskCondition(
                type=kind,
                status=status,
                reason=reason,
                message=message,
                last_transition_time=since,
                observed_generation=generation,
            )
        )
    return conditions
