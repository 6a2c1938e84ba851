"""The task state machine: legal transitions only, each a pure function `record → record`.

Every transition bumps `last_updated_at` (ARCHITECTURE.md §Consistency rules). Input-request keys
are minted here, once per task life, and never reused (SEP-2663 `tasks/update`: "Each key is unique
for the task's lifetime"). Stores persist what these functions return, with compare-and-swap.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, Final

from mcp_types import jsonrpc

from mcp_tasks.protocol import constants, inputs
from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.protocol.models import TaskStatus
from mcp_tasks.tasks.errors import IllegalTransition, InputCapabilityMissing, InvalidInputResponse, LeaseLost
from mcp_tasks.tasks.ids import TaskId
from mcp_tasks.tasks.owner import Owner
from mcp_tasks.tasks.record import Lease, LeaseProcess, TaskRecord, to_epoch_ms
from mcp_tasks.tasks.tools import ToolSpec

ALLOWED: Final[Mapping[TaskStatus, frozenset[TaskStatus]]] = {
    TaskStatus.WORKING: frozenset(
        {TaskStatus.INPUT_REQUIRED, TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED}
    ),
    TaskStatus.INPUT_REQUIRED: frozenset(
        {TaskStatus.WORKING, TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED}
    ),
    TaskStatus.COMPLETED: frozenset(),
    TaskStatus.FAILED: frozenset(),
    TaskStatus.CANCELLED: frozenset(),
}
"""status → statuses it may move to. Terminal states move nowhere (SEP-2663 Task Status)."""


def _move(record: TaskRecord, status: TaskStatus, now: datetime, **changes: object) -> TaskRecord:
    if record.status.is_terminal or (status is not record.status and status not in ALLOWED[record.status]):
        raise IllegalTransition(f"task {record.task_id}: {record.status} → {status} is not allowed")
    waiting = record.status is TaskStatus.INPUT_REQUIRED
    if status is TaskStatus.INPUT_REQUIRED and not waiting:
        changes.setdefault("input_required_since", now)
    elif waiting and status is not TaskStatus.INPUT_REQUIRED and record.input_required_since is not None:
        waited_ms = max(0, to_epoch_ms(now) - to_epoch_ms(record.input_required_since))
        changes.setdefault("input_wait_ms", record.input_wait_ms + waited_ms)
        changes.setdefault("input_required_since", None)
    return dataclasses.replace(record, status=status, last_updated_at=now, **changes)  # type: ignore[arg-type]  # kwargs are record fields


def run_time_used_s(record: TaskRecord, started_at: datetime, now: datetime, waited_before_ms: int = 0) -> float:
    """Seconds of `maxRunTimeSeconds` a run started at `started_at` has used by `now`, in seconds.

    Time spent in `input_required` does not count: `waited_before_ms` is the task's `input_wait_ms` when
    the run started; the current wait (since `input_required_since`) counts from the run's start at most.
    """
    waited_ms = record.input_wait_ms - waited_before_ms
    if record.input_required_since is not None:
        waited_ms += max(0, to_epoch_ms(now) - max(to_epoch_ms(record.input_required_since), to_epoch_ms(started_at)))
    return max(0.0, (now - started_at).total_seconds() - waited_ms / 1000)


def input_wait_exceeded(record: TaskRecord, max_input_wait_s: float, now: datetime) -> bool:
    """True when the task has waited for an answer longer than `max_input_wait_s` seconds without one."""
    since = record.input_required_since
    return (
        record.status is TaskStatus.INPUT_REQUIRED
        and since is not None
        and (now - since).total_seconds() > max_input_wait_s
    )


def input_wait_message(tool: str, max_input_wait_s: float) -> str:
    """The `statusMessage` of a task ended because nobody answered its input requests in time."""
    return (
        f"Tool {tool!r} waited {max_input_wait_s:g}s for an answer to its input request without one "
        "(maxInputWaitSeconds) and was stopped; call it again to be asked again"
    )


def new_task(
    task_id: TaskId,
    owner: Owner,
    tool: ToolSpec,
    arguments: JsonObject,
    now: datetime,
    pre_input_responses: JsonObject | None = None,
    client_capabilities: JsonObject | None = None,
) -> TaskRecord:
    """A fresh `working` task for `tool`, with the tool's `ttlMs` and `pollIntervalMs`.

    `client_capabilities` is the creating request's `clientCapabilities`; only its input capabilities are
    kept (`input_capabilities`), so the task never asks that client for input of a kind it did not declare.
    """
    return TaskRecord(
        task_id=task_id,
        owner=owner,
        tool=tool.name,
        arguments=arguments,
        status=TaskStatus.WORKING,
        created_at=now,
        last_updated_at=now,
        ttl_ms=tool.execution.ttl_ms,
        retention_ms=tool.execution.ttl_ms,
        poll_interval_ms=tool.execution.poll_interval_ms,
        pre_input_responses=dict(pre_input_responses or {}),
        client_capabilities=None if client_capabilities is None else input_capabilities(client_capabilities),
    )


def input_capabilities(client_capabilities: JsonObject) -> JsonObject:
    """The declared capabilities that allow input requests (`elicitation`, `sampling`, `roots`), as objects."""
    return {
        name: dict(value)
        for name, value in client_capabilities.items()
        if name in constants.INPUT_METHOD_CAPABILITY.values() and isinstance(value, dict)
    }


def missing_input_capability(record: TaskRecord, request: JsonObject) -> str | None:
    """The capability `request` (`{method, params}`) needs that the task's client did not declare, or `None`.

    `elicitation/create` in URL mode needs `elicitation.url`; in form mode (the default) `elicitation`
    declared empty (form is implied, for older clients) or with `form` (MCP 2026-07-28 client capabilities).
    A task whose capabilities were not recorded allows every kind.
    """
    declared = record.client_capabilities
    method = str(request.get("method"))
    capability = constants.INPUT_METHOD_CAPABILITY.get(method)
    if declared is None or capability is None:
        return None
    if capability not in declared:
        return capability
    if method == constants.METHOD_ELICIT:
        modes = declared[capability]
        mode = str((request.get("params") or {}).get("mode") or "form")
        if mode == "url" and "url" not in modes:
            return "elicitation.url"
        if mode == "form" and modes and "form" not in modes:
            return "elicitation.form"
    return None


def keep_alive_ttl(record: TaskRecord, now: datetime, retention_ms: int) -> int:
    """`ttl_ms` that keeps a running task at least `retention_ms` from expiry (SEP-2663: ttlMs MAY change).

    `retention_ms` (the tool's `ttlMs` now) is capped by the task's own `retention_ms`, so a hidden task
    (a synchronous or legacy-era call, kept `INLINE_TTL_MS`) is not kept for its tool's full TTL.
    """
    if record.retention_ms is not None:
        retention_ms = min(retention_ms, record.retention_ms)
    needed = to_epoch_ms(now) - to_epoch_ms(record.created_at) + retention_ms
    return max(record.ttl_ms, needed)


def claim(record: TaskRecord, holder: str, now: datetime, lease_duration: timedelta, retention_ms: int) -> TaskRecord:
    """Give `holder` the worker lease and start a new attempt (status unchanged, version bumps in the store)."""
    if record.status.is_terminal:
        raise IllegalTransition(f"task {record.task_id} is {record.status}; there is nothing to run")
    return dataclasses.replace(
        record,
        lease=Lease(holder=holder, expires_at=now + lease_duration),
        attempt=record.attempt + 1,
        ttl_ms=keep_alive_ttl(record, now, retention_ms),
    )


def renew(record: TaskRecord, holder: str, now: datetime, lease_duration: timedelta, retention_ms: int) -> TaskRecord:
    """Extend `holder`'s lease and keep the task's TTL ahead of now.

    Raises:
        LeaseLost: the lease is held by someone else, or the task already finished.
    """
    if record.lease is None or record.lease.holder != holder or record.status.is_terminal:
        raise LeaseLost(f"task {record.task_id}: lease is no longer held by {holder}")
    return dataclasses.replace(
        record,
        lease=dataclasses.replace(record.lease, expires_at=now + lease_duration),  # keeps its `process`
        ttl_ms=keep_alive_ttl(record, now, retention_ms),
    )


def record_process(record: TaskRecord, holder: str, process: LeaseProcess) -> TaskRecord:
    """Note in `holder`'s lease which local process runs this attempt (so a restart can adopt it).

    Raises:
        LeaseLost: the lease is held by someone else, or the task already finished.
    """
    if record.lease is None or record.lease.holder != holder or record.status.is_terminal:
        raise LeaseLost(f"task {record.task_id}: lease is no longer held by {holder}")
    return dataclasses.replace(record, lease=dataclasses.replace(record.lease, process=process))


def adopt(record: TaskRecord, holder: str, now: datetime, lease_duration: timedelta, retention_ms: int) -> TaskRecord:
    """Give `holder` the lease of a run whose process outlived its previous holder; the attempt goes on.

    Unlike `claim`, the attempt is not counted again and the lease keeps its `process`: the same run
    continues under a new supervisor (embedded restart rule, docs/design.md §7).

    Raises:
        IllegalTransition: the task already finished, or its lease names no process to adopt.
    """
    if record.status.is_terminal or record.lease is None or record.lease.process is None:
        raise IllegalTransition(f"task {record.task_id} has no running process to adopt")
    return dataclasses.replace(
        record,
        lease=Lease(holder=holder, expires_at=now + lease_duration, process=record.lease.process),
        ttl_ms=keep_alive_ttl(record, now, retention_ms),
    )


def start_attempt(record: TaskRecord) -> TaskRecord:
    """Count a new run of the task (an executor without leases started one, e.g. created its Job).

    Raises:
        IllegalTransition: the task already finished.
    """
    if record.status.is_terminal:
        raise IllegalTransition(f"task {record.task_id} is {record.status}; there is nothing to run")
    return dataclasses.replace(record, attempt=record.attempt + 1)


def renew_ttl(record: TaskRecord, now: datetime, retention_ms: int) -> TaskRecord:
    """Keep a running task's `ttlMs` at least `retention_ms` ahead of now (executors without leases).

    Raises:
        IllegalTransition: the task already finished (its expiry is final).
    """
    if record.status.is_terminal:
        raise IllegalTransition(f"task {record.task_id} is {record.status}; its ttlMs is final")
    return dataclasses.replace(record, ttl_ms=keep_alive_ttl(record, now, retention_ms))


def request_cancel(record: TaskRecord, requested_by: str, now: datetime) -> TaskRecord:
    """Record a cancellation request. Idempotent; a terminal task is returned unchanged (SEP-2663 `tasks/cancel`)."""
    if record.status.is_terminal or record.cancel_requested_at is not None:
        return record
    return dataclasses.replace(record, cancel_requested_at=now, cancel_requested_by=requested_by, last_updated_at=now)


def mint_input_key(suggested: str, issued: Iterable[str]) -> str:
    """A key never issued in this task's life: `suggested` itself if free, else `suggested-2`, `-3`, ..."""
    taken = set(issued)
    base = suggested if suggested and len(suggested) <= 64 else "input"
    if base not in taken:
        return base
    n = 2
    while f"{base}-{n}" in taken:
        n += 1
    return f"{base}-{n}"


def round_digest(round_id: str, requests: Iterable[tuple[str, JsonObject]]) -> str:
    """What identifies one round of input requests: SHA-256 of the worker's `roundId` and the requests
    (`(suggested key, {method, params})`, canonical JSON), base64url without padding (43 characters).
    A reused id with other requests is another round.
    """
    canonical = json.dumps(
        [round_id, [[suggested, request] for suggested, request in requests]],
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return base64.urlsafe_b64encode(hashlib.sha256(canonical.encode()).digest()).rstrip(b"=").decode()


def add_input_requests(
    record: TaskRecord, requests: Iterable[tuple[str, JsonObject]], now: datetime, round_id: str | None = None
) -> tuple[TaskRecord, list[str]]:
    """Issue input requests (`(suggested key, {method, params})` pairs) and park the task in `input_required`.

    `round_id` makes the round idempotent: when it and the requests are those of the round issued last
    (`record.input_round_digest`, `round_digest`), the worker is retrying a request whose answer it never
    received (the executor stopped, or the connection broke, after the durable write), so the record is
    returned unchanged with that round's keys; a fresh round would mint new keys the client never sees
    answered. Without an id every call is a new round.

    Returns the new record and the minted keys, in request order.

    Raises:
        InputCapabilityMissing: a request needs a capability the task's client did not declare
            (`missing_input_capability`); nothing is issued (MCP 2026-07-28 client capabilities). Not
            for a repeated round: its keys were issued already.
    """
    requests = list(requests)
    digest = None if round_id is None else round_digest(round_id, requests)
    if digest is not None and digest == record.input_round_digest and not record.status.is_terminal:
        keys = list(record.issued_input_keys[-len(requests) :])
        if requests and len(keys) == len(requests):
            return record, keys
    for _suggested, request in requests:
        missing = missing_input_capability(record, request)
        if missing is not None:
            raise InputCapabilityMissing(missing, str(request.get("method")))
    issued = list(record.issued_input_keys)
    pending = dict(record.input_requests)
    minted: list[str] = []
    for suggested, request in requests:
        key = mint_input_key(suggested, issued)
        issued.append(key)
        pending[key] = request
        minted.append(key)
    updated = _move(
        record,
        TaskStatus.INPUT_REQUIRED if pending else record.status,
        now,
        input_requests=pending,
        issued_input_keys=tuple(issued),
        input_round_digest=digest,
    )
    return updated, minted


def answer_input_requests(record: TaskRecord, responses: Mapping[str, Any], now: datetime) -> TaskRecord:
    """Apply `tasks/update` answers: pending keys move to `input_responses`; others are ignored.

    The task returns to `working` when nothing is pending. A terminal task, or an update that names
    no pending key, returns the record unchanged (the update is still acknowledged).

    Raises:
        InvalidInputResponse: an answer to a pending key does not fit its request (its method's result, and
            for a form question the `requestedSchema`; nothing applied).
    """
    if record.status.is_terminal:
        return record
    answered = {key: value for key, value in responses.items() if key in record.input_requests}
    if not answered:
        return record
    for key, value in answered.items():
        problem = inputs.response_problem(record.input_requests[key], value)
        if problem is not None:
            raise InvalidInputResponse(f"inputResponses[{key!r}] {problem}; the request is still pending")
    pending = {key: value for key, value in record.input_requests.items() if key not in answered}
    stored = dict(record.input_responses)
    stored.update(answered)
    status = TaskStatus.INPUT_REQUIRED if pending else TaskStatus.WORKING
    return _move(record, status, now, input_requests=pending, input_responses=stored)


def refuse_input_request(record: TaskRecord, key: str, error: JsonObject, now: datetime) -> TaskRecord:
    """Record that the client answered pending input request `key` with a JSON-RPC error object.

    Only a legacy-era (2025-11-25) client can do this: it gets the request as a server-to-client
    JSON-RPC request and may answer `{"code": -32601, ...}` when it has no handler for the method (a
    capability it did not declare). The key moves to `input_responses` as `{"error": error}`, which the
    tool's runtime turns into `ClientLacksCapability` or `InputRequestFailed`. A key that is not pending
    leaves the record unchanged.
    """
    if record.status.is_terminal or key not in record.input_requests:
        return record
    pending = {k: v for k, v in record.input_requests.items() if k != key}
    stored = {**record.input_responses, key: {"error": dict(error)}}
    status = TaskStatus.INPUT_REQUIRED if pending else TaskStatus.WORKING
    return _move(record, status, now, input_requests=pending, input_responses=stored)


def take_input_responses(record: TaskRecord, keys: Iterable[str]) -> tuple[TaskRecord, dict[str, JsonObject]]:
    """Hand the worker the answered responses for `keys`: unconsumed ones move to `taken_input_responses`
    (consumed), and ones it took before are handed out again, without a write.

    A worker asks again for a key it took only when the answer to its first ask was lost (the executor
    stopped, or the connection broke, after the durable take), so the answer must still be there. A
    finished task hands out nothing.
    """
    if record.status.is_terminal:
        return record, {}
    wanted = set(keys)
    fresh = {key: value for key, value in record.input_responses.items() if key in wanted}
    again = {key: value for key, value in record.taken_input_responses.items() if key in wanted and key not in fresh}
    if not fresh:
        # alone, handed out again only when nothing asked for is still pending: a worker that asks for all
        # of a round's keys each time waits for the next answer instead of spinning on the ones it has
        return record, ({} if wanted & record.input_requests.keys() else again)
    remaining = {key: value for key, value in record.input_responses.items() if key not in fresh}
    taken = {**record.taken_input_responses, **fresh}
    return dataclasses.replace(record, input_responses=remaining, taken_input_responses=taken), {**again, **fresh}


def watch(record: TaskRecord, until: datetime) -> TaskRecord:
    """Renew a hidden task's `watched_until` (its caller still waits); a terminal task is left as it is."""
    if record.status.is_terminal or record.watched_until is None or record.watched_until >= until:
        return record
    return dataclasses.replace(record, watched_until=until)


def next_round(record: TaskRecord, client_capabilities: JsonObject, until: datetime) -> TaskRecord:
    """A caller's input round of a parked synchronous run: from now on the run may ask only what *this*
    request declared (each stateless request speaks for itself), and it is watched until `until`.

    Raises:
        InputCapabilityMissing: a pending request needs a capability this request does not declare.
    """
    if record.status.is_terminal:
        return record
    updated = dataclasses.replace(record, client_capabilities=input_capabilities(client_capabilities))
    for request in record.input_requests.values():
        missing = missing_input_capability(updated, request)
        if missing is not None:
            raise InputCapabilityMissing(missing, str(request.get("method")))
    return dataclasses.replace(updated, watched_until=until if record.watched_until is not None else None)


def await_next_round(record: TaskRecord, until: datetime) -> TaskRecord:
    """A parked hidden task's caller answers in a later round, due by `until` (its `requestState` expiry):
    it is watched exactly until then, neither less nor more; a terminal task is left as it is.
    """
    if record.status.is_terminal or record.watched_until is None:
        return record
    return dataclasses.replace(record, watched_until=until)


def is_abandoned(record: TaskRecord, now: datetime) -> bool:
    """True for an unfinished hidden task whose caller stopped renewing `watched_until` (it crashed)."""
    return not record.status.is_terminal and record.watched_until is not None and record.watched_until < now


ABANDONED_MESSAGE: Final = (
    "Cancelled: nobody is waiting for this call any more (its caller went away, or did not answer its "
    "input requests before its requestState expired), so nobody can read its result"
)


def set_status_message(record: TaskRecord, message: str | None, now: datetime) -> TaskRecord:
    """Set the human-readable `statusMessage` (progress for long work); status unchanged."""
    if record.status.is_terminal:
        raise IllegalTransition(f"task {record.task_id} is {record.status}; its statusMessage is final")
    return dataclasses.replace(record, status_message=message, last_updated_at=now)


def report_progress(
    record: TaskRecord, progress: float, total: float | None, message: str | None, now: datetime
) -> TaskRecord:
    """Record a numeric progress report; `statusMessage` becomes `message`, or `"<progress> of <total>"`."""
    numbers: JsonObject = {"progress": progress} if total is None else {"progress": progress, "total": total}
    shown = message or (f"{progress:g} of {total:g}" if total is not None else f"{progress:g}")
    return _move(record, record.status, now, status_message=shown[:STATUS_MESSAGE_LIMIT], progress=numbers)


def retained_ttl(record: TaskRecord, now: datetime) -> int:
    """`ttl_ms` of a task that finishes at `now`: readable until the later of `created_at + ttl_ms` and
    `now + retention`, where the retention is the `ttlMs` the task was created with (its own `retention_ms`,
    the tool's `ttlMs` or a hidden task's `INLINE_TTL_MS`).

    A run that outlasts its `ttlMs` between two keep-alive writes (or with no keep-alive at all) would
    otherwise end already expired, its result never readable (docs/design.md §11; SEP-2663: `ttlMs` MAY
    change). Units: milliseconds since `created_at`.
    """
    retention_ms = record.retention_ms if record.retention_ms is not None else record.ttl_ms
    ended_after_ms = to_epoch_ms(now) - to_epoch_ms(record.created_at)
    return max(record.ttl_ms, ended_after_ms + retention_ms)


def _finish(record: TaskRecord, status: TaskStatus, now: datetime, **changes: object) -> TaskRecord:
    ttl_ms = retained_ttl(record, now)
    return _move(
        record,
        status,
        now,
        input_requests={},
        input_responses={},
        taken_input_responses={},
        input_round_digest=None,
        lease=None,
        ttl_ms=ttl_ms,
        **changes,
    )


COMPLETION_MESSAGE_LIMIT: Final = 200
"""Longest tool-error text quoted in a completed task's `statusMessage`, in characters."""


def completion_message(result: JsonObject) -> str:
    """The `statusMessage` of a completed task: how it ended, not its last progress line.

    `"Completed"`, or `"Completed with a tool error: <the result's first text, cut to 200 characters>"`
    when the result has `isError: true` (SEP-1303), so `kubectl get mcptasks` and `tasks/get` tell both apart.
    """
    if not result.get("isError"):
        return "Completed"
    texts = [block.get("text") for block in result.get("content") or [] if isinstance(block, dict)]
    first = next((text for text in texts if isinstance(text, str) and text.strip()), "")
    first = " ".join(first.split())
    if len(first) > COMPLETION_MESSAGE_LIMIT:
        first = first[: COMPLETION_MESSAGE_LIMIT - 1] + "…"
    return f"Completed with a tool error: {first}" if first else "Completed with a tool error"


def complete(record: TaskRecord, result: JsonObject, now: datetime, status_message: str | None = None) -> TaskRecord:
    """`completed` with the tool's `CallToolResult` (including tool errors, `isError: true`).

    `status_message` defaults to `completion_message(result)`.
    """
    inlined = {**result, "resultType": constants.RESULT_TYPE_COMPLETE}
    message = status_message if status_message is not None else completion_message(result)
    return _finish(record, TaskStatus.COMPLETED, now, result=inlined, status_message=message)


STATUS_MESSAGE_LIMIT: Final = 1000
"""Longest `statusMessage` an executor writes for a failure it observed, in characters."""


def failing(message: str, reason: str) -> Callable[[TaskRecord, datetime], TaskRecord]:
    """The change to `failed` for an infrastructure failure the tool never saw, in every executor.

    The JSON-RPC error is -32603 with `message` (cut to `STATUS_MESSAGE_LIMIT`) and `data.reason`, a
    CamelCase word that says why (`StartTimeout`, `OutcomeUnknown`, `DeadlineExceeded`, `CannotStart`,
    `ToolRemoved`, `InvalidTool`, `JobFailed`, `JobRefused`, `InternalError`); the McpTask's `Finished` condition takes
    it as its reason. `message` is also the `statusMessage`.
    """
    if len(message) > STATUS_MESSAGE_LIMIT:
        message = message[: STATUS_MESSAGE_LIMIT - 1] + "…"
    error: JsonObject = {"code": jsonrpc.INTERNAL_ERROR, "message": message, "data": {"reason": reason}}
    return lambda record, now: fail(record, error, message, now)


def fail(record: TaskRecord, error: JsonObject, status_message: str, now: datetime) -> TaskRecord:
    """`failed` with a JSON-RPC error object `{code, message, data?}` and a `statusMessage` saying why."""
    return _finish(record, TaskStatus.FAILED, now, error=error, status_message=status_message)


def cancel(record: TaskRecord, now: datetime, status_message: str = "Cancelled at the client's request") -> TaskRecord:
    """`cancelled`: the work stopped before it finished."""
    return _finish(record, TaskStatus.CANCELLED, now, status_message=status_message)


def reset_for_rerun(record: TaskRecord, now: datetime) -> TaskRecord:
    """Prepare an idempotent task whose run ended without a result (worker lost, server stopped) for a fresh run.

    Pending requests belong to the lost run and are dropped, and its unconsumed answers count as taken
    (the new run's keys are new, so it is never handed one; the Kubernetes view, which keeps every answer
    in `spec`, reads them so); issued keys are kept so the new run can never reuse one.
    """
    return _move(
        record,
        TaskStatus.WORKING,
        now,
        input_requests={},
        input_responses={},
        taken_input_responses={**record.taken_input_responses, **record.input_responses},
        input_round_digest=None,
        input_wait_ms=0,
        input_required_since=None,
        lease=None,
        status_message=(
            "Run again from the start: its previous run ended without a result (a lost worker or a stopped "
            "server; the tool is idempotent)"
        ),
    )


MAX_RUNS: Final = 3
"""Runs one task may start in all, whatever ended the earlier ones (a worker, server, operator or Job lost,
a server stopped): past it a run that is lost fails the task instead of starting it again."""

OUTCOME_UNKNOWN: Final = (
    "The worker running this task was lost (server restart or crash) and the tool is not declared idempotent, "
    "so the outcome is unknown; check the tool's side effects before calling it again"
)


def after_lost_run(
    record: TaskRecord, now: datetime, rerunnable: bool, why: str, unknown: str = OUTCOME_UNKNOWN
) -> TaskRecord:
    """The restart rule of every executor for a run that was lost before it ended (docs/design.md §7).

    A task whose run may safely start again (its tool is idempotent, or the call never reached a worker)
    is reset for a fresh run, unless it has started `MAX_RUNS` runs already: then it fails `WorkerLost`.
    Any other task fails `OutcomeUnknown` with `unknown`.

    Args:
        record: the unfinished task.
        now: UTC.
        rerunnable: whether starting the tool again is safe.
        why: what was seen of the last loss, quoted in the `WorkerLost` message.
        unknown: the `OutcomeUnknown` message for this kind of loss.

    Raises:
        IllegalTransition: the task already finished.
    """
    if not rerunnable:
        return failing(unknown, "OutcomeUnknown")(record, now)
    if record.attempt >= MAX_RUNS:
        return failing(runs_exhausted_message(record, why), "WorkerLost")(record, now)
    return reset_for_rerun(record, now)


def runs_exhausted_message(record: TaskRecord, why: str) -> str:
    """The `statusMessage` of a task that lost its run on each of its `MAX_RUNS` runs (`WorkerLost`)."""
    return f"Tool {record.tool!r} lost its run on each of {record.attempt} runs (last: {why}); it is not run again"
