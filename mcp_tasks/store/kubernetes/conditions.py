"""`status.conditions` of an McpTask, derived from the task record (Kubernetes API conventions).

Three condition types while a task lives, so `kubectl wait --for=condition=Finished mcptask/<taskId>`
and dashboards built on conditions work:

- `Started`: `True` once a run of the tool began (`attempt` ≥ 1); reason `RunStarted` / `NotStarted`, or
  `Queued` while it waits for a slot (its `statusMessage` starts `queued: `: the operator's admission, or a
  Job suspended until Kueue admits it).
- `InputRequired`: `True` while the task waits for input; reason `InputRequested` / `NoPendingInput`.
- `Finished`: `True` once the task is terminal; reason `Completed`, `ToolError` (completed with
  `isError: true`), `Cancelled`, `Failed`, or the `reason` a failure's `error.data` names (e.g.
  `StartTimeout`, `OutcomeUnknown`); `Running` until then.

A finished task keeps `Finished` alone: `Started` and `InputRequired` describe a run that is over.
Every retained task costs etcd and each API server's watch cache for as long as it is kept, and those
two were about 270 of its bytes (docs/performance.md). `observedGeneration` stays on every condition:
`kubectl wait` treats a condition whose `observedGeneration` is below `metadata.generation` as not
met, and a CRD of an earlier version (a gateway upgraded before the CRD chart) would default an
absent one to 0.

No condition carries a `message`: what one would say is stored once, elsewhere in `status` (the
final `statusMessage`, `attempt`, the keys of `inputRequests`), and an McpTask keeps nothing twice.
Objects written by earlier versions carry messages and all three types; they are read as they are and
rewritten at the next status write.

Pure: computed from the record and the previous conditions inside the store's one status write per
transition (no extra write). `lastTransitionTime` moves only when a condition's status changes, and
every condition carries the McpTask's `metadata.generation` as `observedGeneration`. No I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from mcp_tasks.protocol.models import TaskStatus
from mcp_tasks.store.kubernetes.resources import TaskCondition
from mcp_tasks.tasks.fair_share import QUEUED_PREFIX
from mcp_tasks.tasks.record import TaskRecord, iso_ms

CONDITION_STARTED: Final = "Started"
CONDITION_INPUT_REQUIRED: Final = "InputRequired"
CONDITION_FINISHED: Final = "Finished"
CONDITION_TYPES: Final = (CONDITION_STARTED, CONDITION_INPUT_REQUIRED, CONDITION_FINISHED)


def desired(record: TaskRecord) -> list[tuple[str, str, str]]:
    """`(type, status, reason)` of each condition for `record`, in `CONDITION_TYPES` order; a finished
    task's `Finished` alone.
    """
    if record.status.is_terminal:
        return [(CONDITION_FINISHED, "True", record.finished_reason)]
    queued = (record.status_message or "").startswith(QUEUED_PREFIX)
    started = record.attempt >= 1 and not queued
    waiting = record.status is TaskStatus.INPUT_REQUIRED
    return [
        (CONDITION_STARTED, "True" if started else "False", _start_reason(started, queued)),
        (CONDITION_INPUT_REQUIRED, "True" if waiting else "False", "InputRequested" if waiting else "NoPendingInput"),
        (CONDITION_FINISHED, "False", "Running"),
    ]


def _start_reason(started: bool, queued: bool) -> str:
    if started:
        return "RunStarted"
    return "Queued" if queued else "NotStarted"


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
    for kind, status, reason in desired(record):
        old = before.get(kind)
        since = old.last_transition_time if old is not None and old.status == status else now
        conditions.append(
            TaskCondition(
                type=kind,
                status=status,
                reason=reason,
                last_transition_time=since,
                observed_generation=generation,
            )
        )
    return conditions
