"""Kueue, where a cluster runs it: which LocalQueue a task's Job goes to, and how such a Job looks. Pure.

With `OperatorSettings.kueue_enabled`, a task whose tool or tenant maps to a LocalQueue (`queue_for`) gets its
Job created suspended (`spec.suspend: true`) and labelled `kueue.x-k8s.io/queue-name: <queue>`, and the
operator's own admission (`operator.admission`) leaves it alone: Kueue's controller admits the Job (sets
`suspend: false`) when its ClusterQueue has quota, as it does for any batch/v1 Job
(https://kueue.sigs.k8s.io/docs/tasks/run/jobs/). Until then the task is `working` with a `statusMessage`
saying it waits for Kueue (`waiting_message`), no start deadline runs, and such Jobs do not count against the
operator's `max_running_tasks` or the tenants' running budgets: Kueue's quotas hold them instead.

Which queue: the tool's (`kueue_tool_queues`, e.g. a GPU tool's queue), else the tenant's
(`kueue_tenant_queues`: Kueue's fair sharing between ClusterQueues of one cohort then applies between
tenants), else `kueue_queue_name`; a task mapped to no queue (all empty) is admitted by the operator itself.
Never called by anything but the operator's Job building and deciding.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.tasks.fair_share import QUEUED_PREFIX
from mcp_tasks.tasks.frozen_mapping import FrozenJsonMapping

QUEUE_NAME_LABEL: Final = "kueue.x-k8s.io/queue-name"
"""The label Kueue reads a Job's LocalQueue from (Kueue's `constants.QueueLabel`)."""

_LABEL_VALUE: Final = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


class QueueNames(FrozenJsonMapping[str]):
    """A name → LocalQueue mapping (tenant or tool name to queue), immutable and hashable.

    `str()` is its JSON (sorted keys), or `""` when empty.
    """

    __slots__ = ()


def check_queue_name(name: str) -> None:
    """Raise `ValueError` unless `name` can be a label value (and so a LocalQueue's name in the label)."""
    if not _LABEL_VALUE.match(name):
        raise ValueError(f"{name!r} is not a valid LocalQueue name (a label value: 1-63 of A-Z a-z 0-9 - _ .)")


def parse_queue_names(text: str) -> QueueNames:
    """Parse `MCPTASKS_KUEUE_TENANT_QUEUES` / `MCPTASKS_KUEUE_TOOL_QUEUES`: a JSON object of name → LocalQueue,
    e.g. `{"team-a": "team-a", "batch": "low-priority"}`; an empty text is no mapping.

    Raises:
        ValueError: not a JSON object of strings, or a queue name that cannot be a label value.
    """
    if not text.strip():
        return QueueNames()
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"must be a JSON object of name → LocalQueue ({exc.msg} at {exc.pos})") from exc
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise ValueError('must be a JSON object of name → LocalQueue, e.g. {"team-a": "team-a-queue"}')
    for queue in data.values():
        check_queue_name(queue)
    return QueueNames({str(key): value for key, value in data.items()})


def queue_for(tool: str, tenant: str, default: str, tool_queues: QueueNames, tenant_queues: QueueNames) -> str | None:
    """The LocalQueue of a task of `tool` owned by `tenant`: the tool's, else the tenant's, else `default`;
    `None` when that is empty (the operator admits the task itself).
    """
    return tool_queues.get(tool) or tenant_queues.get(tenant) or default or None


def queue_job(job: JsonObject, queue: str) -> JsonObject:
    """`job` (a Job manifest) made Kueue's: created suspended, labelled with its LocalQueue."""
    job["metadata"]["labels"][QUEUE_NAME_LABEL] = queue
    job["spec"]["suspend"] = True
    return job


def queue_of(job: JsonObject) -> str | None:
    """The LocalQueue a Job (or its trimmed copy) was created for, or `None` when it is not Kueue's."""
    value = ((job.get("metadata") or {}).get("labels") or {}).get(QUEUE_NAME_LABEL)
    return None if value is None else str(value)


def suspended(job: JsonObject) -> bool:
    """Whether the Job is suspended (`spec.suspend`): a Kueue Job not admitted yet (or evicted)."""
    return bool((job.get("spec") or {}).get("suspend"))


def waiting_message(queue: str) -> str:
    """The `statusMessage` of a task whose Job waits for Kueue to admit it (starts like every queued one)."""
    return f"{QUEUED_PREFIX}waiting for Kueue to admit its Job (LocalQueue {queue})"
