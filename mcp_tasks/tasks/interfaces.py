"""The seams between the gateway and its deployments: `TaskStore`, `ToolCatalog`, `ArtifactStore`, `ToolExecutor`.

The gateway talks only to these (ARCHITECTURE.md: "The gateway never knows which deployment it is
in"). `store/sqlite` and `store/kubernetes` implement `TaskStore`; the runner implements
`ToolExecutor`. Also the one retry loop every read-modify-write uses (`transact`).
"""

from __future__ import annotations

import asyncio
import enum
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol, TypeVar, runtime_checkable

from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.tasks.errors import VersionConflict
from mcp_tasks.tasks.fair_share import Queued
from mcp_tasks.tasks.owner import Owner
from mcp_tasks.tasks.record import TaskRecord
from mcp_tasks.tasks.tools import ToolSpec

T = TypeVar("T")


class Clock(Protocol):
    """Wall time: the current UTC time (injected so tests can control it). Read it as `clock()`.

    Time has two readings, and each is its own callable: `Clock` for what is stored and compared with
    stored times (deadlines, leases, TTLs, `requestState` expiry), `Monotonic` for intervals within this
    process (delays, back-offs). Most code needs only one of them, so taking two small callables keeps the
    dozens of `clock()` call sites as they are and lets a test pass `lambda: NOW`; a fake that drives both
    (`tests/clock.py`) passes its two methods.
    """

    def __call__(self) -> datetime:
        """Return now, timezone-aware UTC."""
        ...


class Monotonic(Protocol):
    """Monotonic time in seconds, for intervals within one process (the real one is `time.monotonic`)."""

    def __call__(self) -> float:
        """Return seconds since an arbitrary fixed point; never goes backwards."""
        ...


def utc_now() -> datetime:
    """The real clock."""
    return datetime.now(UTC)


class Writer(enum.Enum):
    """Who writes a task, named by the caller of every write (the store checks it, never infers it).

    - `CLIENT`: the client's intent (SEP-2663 `tasks/update` answers, `tasks/cancel` requests, a
      synchronous caller's input round and its watch). On Kubernetes: the McpTask `spec`.
    - `EXECUTOR`: what the executor observed (status, input requests, progress, results, leases,
      attempts, TTL). On Kubernetes: the status subresource.
    """

    CLIENT = "client"
    EXECUTOR = "executor"


@dataclass(frozen=True, slots=True)
class Unfinished:
    """Non-terminal tasks: counts by status value (`{"working": 3}`) and the oldest one's `created_at`."""

    counts: dict[str, int]
    oldest_created_at: datetime | None


class TaskStore(Protocol):
    """Durable task records with compare-and-swap writes.

    Consistency (ARCHITECTURE.md §Consistency rules): `create` returns only once any reader can `get`
    the record; every other write is CAS on `version`.
    """

    async def create(self, record: TaskRecord) -> TaskRecord:
        """Durably insert a new record and return it with its first `version`."""
        ...

    async def get(self, task_id: str, owner: Owner | None = None, *, fresh: bool = False) -> TaskRecord:
        """Return the record, checking `owner` when given.

        A store that serves reads from a cache (Kubernetes) may return a slightly older version; `fresh`
        asks for the authoritative one (for a decision that ignores a client's write, e.g. an answer to a
        key that does not look pending yet).

        Raises:
            TaskNotFound: no such task, or it belongs to another owner, or it has expired (all look alike).
        """
        ...

    async def compare_and_swap(self, record: TaskRecord, writer: Writer) -> TaskRecord:
        """Write `record`, a change made by `writer`, if the stored version still equals `record.version`;
        return it with the next version.

        Raises:
            VersionConflict: the stored record changed since it was read.
            TaskNotFound: the record is gone.
            WrongWriter: the change touches what only the other writer may write (a programming error).
        """
        ...

    async def list_runnable(self, now: datetime, limit: int) -> Sequence[TaskRecord]:
        """Non-terminal tasks with no lease or an expired one, oldest first, at most `limit`."""
        ...

    async def delete_expired(self, now: datetime, limit: int) -> Sequence[str]:
        """Delete up to `limit` terminal tasks past `created_at + ttl_ms`; return their ids."""
        ...

    async def unfinished(self) -> Unfinished:
        """How many non-terminal tasks there are by status, and the oldest one's creation, cheaply."""
        ...

    async def wait_for_change(self, timeout_s: float, task_id: str | None = None) -> None:
        """Return when `task_id`'s record (or, without it, any record) may have changed, or after `timeout_s` s.

        Spurious wake-ups are allowed; callers re-read. Waiters on one task are not woken by writes to others.
        """
        ...

    async def wait_for_new_tasks(self, timeout_s: float) -> None:
        """Return when a task may have been created, or after `timeout_s` seconds."""
        ...

    def observe(self, observer: WriteObserver) -> Callable[[], None]:
        """Call `observer(before, after)` after each write this store makes durable (`create`: `before` is
        `None`; `compare_and_swap`: the record at the version it replaced); returns its remover.

        Registered where the store is composed (metrics, Events), so no writer has to report its writes.
        Observers run on the writer's task once the write is durable; one that raises is logged and does
        not fail the write.
        """
        ...


@dataclass(frozen=True, slots=True)
class ClaimView:
    """What a claim pass needs to know, read at once (`FairQueue.claim_view`).

    Attributes:
        running: `(principal, runs)` under a live lease, any holder.
        lapsed: unfinished tasks whose lease expired (their holder is gone; the restart rules apply).
        queued: each waiting principal's oldest queued tasks (at most `per_principal` each, no order).
    """

    running: list[tuple[Owner, int]]
    lapsed: int
    queued: list[Queued]


@runtime_checkable
class UnfinishedCount(Protocol):
    """A task store that counts a principal's unfinished tasks, for the gateway's unfinished-task quota
    (`gateway/admission.py`): the SQLite store from its index, the Kubernetes store from its watch cache.
    Both stores have it; a store without it would hold no quota.
    """

    async def unfinished_of(self, owner: Owner, at_most: int) -> int:
        """The unfinished tasks (`working` or `input_required`) `owner` holds, counted up to `at_most`."""
        ...


@runtime_checkable
class FairQueue(Protocol):
    """A task store that answers the fair-share questions from indexes (`SqliteTaskStore`): the embedded
    claim path, the gateway's quota and a queued task's place (`tasks.fair_share`). A store without it gets
    the oldest-first claim and no quota.

    "Queued" is unfinished and never leased (or reset for a re-run); "leased" is unfinished under a lease.
    """

    async def running_usage(self, now: datetime) -> list[tuple[Owner, int]]:
        """`(principal, runs)` of the unfinished tasks under a live lease, any holder."""
        ...

    async def queued_heads(self, per_principal: int) -> list[Queued]:
        """The oldest `per_principal` queued tasks of each principal that has any (no order promised)."""
        ...

    async def lapsed(self, now: datetime, limit: int) -> list[TaskRecord]:
        """Unfinished tasks whose lease expired (their holder is gone), oldest first, at most `limit`."""
        ...

    async def claim_view(self, now: datetime, per_principal: int) -> ClaimView:
        """`running_usage`, the number of lapsed leases and `queued_heads(per_principal)`, in one read."""
        ...

    async def queued_records(self, task_ids: Sequence[str]) -> list[TaskRecord]:
        """The records of `task_ids` that are still queued, in the order given."""
        ...

    async def unfinished_of(self, owner: Owner, at_most: int) -> int:
        """The unfinished tasks `owner` holds, counted up to `at_most`."""
        ...

    async def queued_ahead(self, record: TaskRecord, at_most: int) -> int:
        """The queued tasks of `record`'s tenant created before it, counted up to `at_most`."""
        ...

    async def running_of(self, owner: Owner, now: datetime) -> tuple[int, int]:
        """Runs under a live lease of `owner`'s tenant, and of `owner` itself."""
        ...

    async def tenant_counts(self) -> dict[str, tuple[int, int]]:
        """Tenant → (queued, leased) unfinished tasks."""
        ...


class ToolCatalog(Protocol):
    """The declared tools (McpTool manifests), in a deterministic order."""

    def list_tools(self) -> Sequence[ToolSpec]:
        """All tools, sorted by the catalog's stable order."""
        ...

    def get_tool(self, name: str) -> ToolSpec | None:
        """The tool named `name`, or `None`."""
        ...


@dataclass(frozen=True, slots=True)
class Artifact:
    """A stored large result: bytes plus its MIME type."""

    data: bytes
    mime_type: str


class ArtifactStore(Protocol):
    """Storage for results larger than the inline cap, outside the task store (never in a row or etcd)."""

    async def put(self, task_id: str, name: str, data: bytes, mime_type: str) -> str:
        """Store an artifact and return its `mcptasks://artifacts/<taskId>/<name>` URI."""
        ...

    async def get(self, task_id: str, name: str) -> Artifact | None:
        """The artifact, or `None` when absent."""
        ...

    async def delete_task(self, task_id: str) -> None:
        """Delete every artifact of a task (TTL cleanup)."""
        ...


class InputNeeded(Exception):
    """A synchronous run asked for input mid-run.

    `task_id` names the durable execution now waiting for the answers (its `inputRequests` are pending),
    which the caller answers with a multi-round-trip retry (SEP-2322); `None` when the caller can take
    no input rounds (a legacy-era call) and the run was stopped.
    """

    def __init__(self, tool: str, task_id: str | None = None) -> None:
        super().__init__(tool)
        self.tool = tool
        self.task_id = task_id


ProgressSink = Callable[[JsonObject], Awaitable[None]]
"""Where a synchronous caller hears of its run's progress: called with `{progress, total?, message?}`."""


@dataclass(frozen=True, slots=True)
class InlineCall:
    """One synchronous `tools/call` for a `ToolExecutor`.

    Attributes:
        tool, arguments, owner: what to run, with which (validated) arguments, for whom.
        pre_input_responses: answers to the tool's `inputBeforeTask` requests, by key (may be empty).
        client_capabilities: the calling request's. A run that asks for input becomes a durable (hidden)
            task owned by `owner`, parked in `input_required`, never asking a kind of input these lack;
            `None` (a legacy-era caller, which has no input rounds) stops such a run instead.
        input_responses: answers the request offered up front (`inputResponses` without `requestState`,
            SEP-2322); an ask whose key they answer validly is answered from them at once.
        on_progress: hears the tool's numeric progress reports while the call waits.
    """

    tool: ToolSpec
    arguments: JsonObject
    owner: Owner
    pre_input_responses: JsonObject = field(default_factory=dict)
    client_capabilities: JsonObject | None = None
    input_responses: JsonObject = field(default_factory=dict)
    on_progress: ProgressSink | None = None


class ToolExecutor(Protocol):
    """Runs a tool synchronously (no task) for `tools/call` requests that are not task-augmented."""

    async def run_inline(self, call: InlineCall) -> JsonObject:
        """Run `call.tool` within its `sync_timeout_seconds` and return its `CallToolResult`.

        Raises:
            InputNeeded: the tool asked for input; `task_id` names the parked run, or is `None` when
                `call.client_capabilities` is `None` (the run was stopped).
            TimeoutError: the run exceeded its bounded wait (it was stopped).
        """
        ...


WriteObserver = Callable[[TaskRecord | None, TaskRecord], None]
"""Called with (the record before, the record as written) after each durable write; `None` before a create.

Registered on the store that makes the writes (`TaskStore.observe`), which calls it itself."""


_BACKOFF_BASE_S = 0.001  # first retry waits up to 2 ms
_BACKOFF_CAP_S = 0.1  # no retry waits more than 100 ms


async def transact(
    store: TaskStore,
    task_id: str,
    change: Callable[[TaskRecord], tuple[TaskRecord, T]],
    writer: Writer,
    owner: Owner | None = None,
    attempts: int = 16,
    confirm_no_change: bool = False,
) -> tuple[TaskRecord, T]:
    """Read-modify-write one task with compare-and-swap, retrying on conflict.

    `change` is a pure function returning the new record and a value for the caller; when it returns
    the very record it was given, nothing is written. `writer` says whose change it is (`Writer`).
    With `confirm_no_change` that outcome is decided again on an authoritative read (`get(fresh=True)`)
    before it stands: a client's write (an answer) is never dropped because a cached copy lagged behind
    another replica's write. Between tries the writer sleeps a random time up to an exponentially
    growing cap ("full jitter": 2 ms, 4 ms, ... at most 100 ms), so N writers racing on one task spread
    out and each lands in about N rounds instead of all retrying in lock-step; the worst case over the
    default 16 attempts is about 1.1 s of waiting.

    Raises:
        TaskNotFound: the task is missing or not visible to `owner`.
        VersionConflict: still conflicting after `attempts` tries.
        WrongWriter: `change` touched what only the other writer may write.
    """
    for attempt in range(attempts):
        if attempt:
            await asyncio.sleep(random.uniform(0, min(_BACKOFF_CAP_S, _BACKOFF_BASE_S * 2**attempt)))
        current = await store.get(task_id, owner)
        updated, value = change(current)
        if updated is current and confirm_no_change:
            current = await store.get(task_id, owner, fresh=True)
            updated, value = change(current)
        if updated is current:
            return current, value
        try:
            written = await store.compare_and_swap(updated, writer)
        except VersionConflict:
            continue
        return written, value
    raise VersionConflict(f"task {task_id}: too many concurrent writers, try again")


__all__ = [
    "Artifact",
    "ArtifactStore",
    "Clock",
    "InlineCall",
    "InputNeeded",
    "Monotonic",
    "ProgressSink",
    "TaskStore",
    "ToolCatalog",
    "ToolExecutor",
    "Unfinished",
    "WriteObserver",
    "Writer",
    "transact",
    "utc_now",
]
