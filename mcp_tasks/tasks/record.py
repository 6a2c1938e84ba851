"""The task record: the single source of truth both stores hold (ARCHITECTURE.md §The task record).

A frozen value; every change produces a new record through `tasks.transitions` and is written
with compare-and-swap on `version`. Times are UTC `datetime`s inside the domain and milliseconds
or ISO 8601 strings only at the wire (`to_wire_task`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from mcp_tasks.protocol import constants
from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.protocol.models import CreateTaskResult, DetailedTask, TaskStatus
from mcp_tasks.tasks.ids import TaskId
from mcp_tasks.tasks.owner import Owner


def iso_ms(moment: datetime) -> str:
    """Format a UTC datetime as ISO 8601 with millisecond precision and a `Z` suffix."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def to_epoch_ms(moment: datetime) -> int:
    """UTC datetime → integer milliseconds since the Unix epoch."""
    return int(moment.timestamp() * 1000)


def from_epoch_ms(value: int) -> datetime:
    """Integer milliseconds since the Unix epoch → UTC datetime."""
    return datetime.fromtimestamp(value / 1000, tz=UTC)


@dataclass(frozen=True, slots=True)
class LeaseProcess:
    """Which local process runs the leased attempt, so a restarted runner can adopt it (embedded default).

    `identity` tells this process apart from a later one that reuses the pid (on Linux the boot id and
    the process's start time in clock ticks); `execution_id` addresses it on the worker API, whose
    `worker_port` it was told to call.
    """

    pid: int
    identity: str
    execution_id: str
    worker_port: int
    warm_endpoint: str | None = None
    """A call on a warm worker: the worker's `host:port`, where a restarted runner re-attaches to the call
    by `execution_id` (`pid` is the local worker's, or 0 for a pod); `None` for a process of its own."""


@dataclass(frozen=True, slots=True)
class Lease:
    """A worker's claim on a task: who holds it and until when (UTC). Renewed while the work runs.

    `process` is the local process running the attempt, once started (embedded runner only).
    """

    holder: str
    expires_at: datetime
    process: LeaseProcess | None = None


@dataclass(frozen=True, slots=True)
class ArgumentsRef:
    """Where a task's arguments are when they are too large to keep in its record (`tasks.arguments`).

    `name` is the task's artifact holding them (compact JSON), `size_bytes` its length in bytes and
    `sha256` its hex SHA-256 digest, checked when they are read back.
    """

    name: str
    size_bytes: int
    sha256: str


_REASON: Final = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
"""What the Kubernetes API conventions allow as a `reason` (CamelCase, machine-readable)."""


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """One task, as stored.

    Shapes: `arguments` is the tool's argument object, empty when `arguments_ref` names the artifact
    that holds it (a store that bounds its objects; read it with `tasks.arguments.load`).
    `input_requests` maps each *pending* key to a bare `{method, params}` input request;
    `issued_input_keys` lists every key ever issued, in order, so none is reused;
    `input_round_digest` identifies the latest round of input requests (`transitions.round_digest` of the
    worker's `roundId` and the requests; the last keys of `issued_input_keys` are that round's): a round
    sent again, because its answer was lost, gets the same keys;
    `input_responses` holds answered responses not yet consumed by the worker, and
    `taken_input_responses` those it consumed, handed out again if it asks for them again (the answer to
    its first ask was lost); both are dropped when the task ends (a re-run counts the lost run's
    unconsumed answers as taken: its keys are new, so it is never handed one).
    `pre_input_responses` are the answers to the tool's `inputBeforeTask` requests (pre-creation MRTR).
    `client_capabilities` holds the input capabilities (`elicitation`, `sampling`, `roots`) the request
    that created the task declared; only input of those kinds may be asked (`None`: not recorded).
    `result` is the inlined `CallToolResult` (≤ the inline cap; larger results are artifacts) and
    `error` a JSON-RPC error object. `ttl_ms` counts from `created_at`. `version` is the store's opaque
    CAS token (a row counter in SQLite, `metadata.resourceVersion` in Kubernetes): compare it only for equality.
    `progress` is the tool's last numeric report `{progress, total?}` (a synchronous caller's
    `notifications/progress`); clients of a task see it only as `status_message`. `input_wait_ms` is the
    time spent in `input_required` so far (ms) and `input_required_since` when the current wait began:
    waiting does not count against `maxRunTimeSeconds`, and one wait is bounded by `maxInputWaitSeconds`.
    """

    task_id: TaskId
    owner: Owner
    tool: str
    arguments: JsonObject
    status: TaskStatus
    created_at: datetime
    last_updated_at: datetime
    ttl_ms: int
    poll_interval_ms: int
    status_message: str | None = None
    progress: JsonObject | None = None
    input_requests: dict[str, JsonObject] = field(default_factory=dict)
    issued_input_keys: tuple[str, ...] = ()
    input_round_digest: str | None = None
    input_responses: dict[str, JsonObject] = field(default_factory=dict)
    taken_input_responses: dict[str, JsonObject] = field(default_factory=dict)
    pre_input_responses: dict[str, JsonObject] = field(default_factory=dict)
    client_capabilities: JsonObject | None = None
    cancel_requested_at: datetime | None = None
    cancel_requested_by: str | None = None
    result: JsonObject | None = None
    error: JsonObject | None = None
    lease: Lease | None = None
    attempt: int = 0
    retention_ms: int | None = None
    traceparent: str | None = None
    watched_until: datetime | None = None
    input_wait_ms: int = 0
    input_required_since: datetime | None = None
    arguments_ref: ArgumentsRef | None = None
    unknown_fields: JsonObject = field(default_factory=dict)
    """Stored fields this version does not know (a newer version wrote them): kept as read and written
    back unchanged, never interpreted (the embedded store's body keys; an McpTask keeps its own)."""
    version: str = ""

    @property
    def finished_reason(self) -> str:
        """How a terminal task ended, as one CamelCase word (Kubernetes condition and Event reason).

        `Completed`, `ToolError` (completed with `isError: true`), `Cancelled`, or a failure's
        `error.data.reason` (`StartTimeout`, `OutcomeUnknown`, ...; see `transitions.failing`), else `Failed`.
        """
        if self.status is TaskStatus.COMPLETED:
            return "ToolError" if (self.result or {}).get("isError") else "Completed"
        if self.status is TaskStatus.CANCELLED:
            return "Cancelled"
        data = (self.error or {}).get("data")
        named = data.get("reason") if isinstance(data, dict) else None
        return named if isinstance(named, str) and _REASON.match(named) else "Failed"

    @property
    def expires_at(self) -> datetime:
        """`created_at + ttl_ms`: after this a *finished* task is gone (running tasks never expire)."""
        return self.created_at + timedelta(milliseconds=self.ttl_ms)

    def is_expired(self, now: datetime) -> bool:
        """True when the task is terminal and past `created_at + ttl_ms` (SEP-2663 TTL)."""
        return self.status.is_terminal and now >= self.expires_at

    def superseded(self, attempt: int | None, holder: str | None = None) -> bool:
        """Whether a run's write would be stale: a later run started (`self.attempt > attempt`), or the
        task's lease names another executor than `holder` (it was taken over or adopted).

        The fence of every outcome write (docs/design.md §7): the run that lost its lease may still be
        alive (a paused process, a partitioned node) and must not write over its successor's result.
        `None` skips that half of the check (an executor without leases passes no holder).
        """
        if attempt is not None and self.attempt > attempt:
            return True
        return holder is not None and self.lease is not None and self.lease.holder != holder

    def _task_fields(self) -> dict[str, Any]:
        """The `Task` fields every wire form of this record shares (SEP-2663 `Task`)."""
        return {
            "task_id": self.task_id,
            "status": self.status,
            "status_message": self.status_message,
            "created_at": iso_ms(self.created_at),
            "last_updated_at": iso_ms(self.last_updated_at),
            "ttl_ms": self.ttl_ms,
            "poll_interval_ms": self.poll_interval_ms,
        }

    def to_created_result(self) -> CreateTaskResult:
        """The flat `CreateTaskResult` that hands this task out on `tools/call` (SEP-2663 Creating Tasks)."""
        return CreateTaskResult(**self._task_fields())

    def to_wire_task(self) -> DetailedTask:
        """The `DetailedTask` that `tasks/get` and `notifications/tasks` carry for this record."""
        return DetailedTask(
            **self._task_fields(),
            input_requests=dict(self.input_requests) if self.status is TaskStatus.INPUT_REQUIRED else None,
            result=strip_related_task(self.result) if self.status is TaskStatus.COMPLETED else None,
            error=self.error if self.status is TaskStatus.FAILED else None,
        )


def strip_related_task(result: JsonObject | None) -> JsonObject | None:
    """Drop the legacy `related-task` `_meta` key from an inlined result (SEP-2663 forbids it there)."""
    if result is None:
        return None
    meta = result.get("_meta")
    if isinstance(meta, dict) and constants.META_RELATED_TASK in meta:
        cleaned: dict[str, Any] = {k: v for k, v in meta.items() if k != constants.META_RELATED_TASK}
        return {**result, "_meta": cleaned}
    return result
