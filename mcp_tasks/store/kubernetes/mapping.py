"""`TaskRecord` ⇄ McpTask object, and which subresource a record change must be written to.

The record is a *view* of `(spec, status)`: answers live in `spec.inputResponses` (client intent,
written by the gateway), the requests they answer stay in `status.inputRequests` until the executor
consumes them. So a key is *pending* when it is in `status.inputRequests` and not answered, *taken* when
it was issued and answered but is no longer there (`TaskRecord.taken_input_responses`), and a task
the executor parked in `input_required` reads as `working` as soon as every pending key is answered:
`tasks/update` "removes answered keys from inputRequests before it acknowledges" (ARCHITECTURE.md
§Consistency rules) with one write to `spec`, and the executor's writes touch only `status`.
`lastUpdatedAt` is the latest of the executor's `status.lastUpdatedAt` and the client's
`spec.lastAnsweredAt` / `spec.cancelRequestedAt`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.protocol.models import TaskStatus
from mcp_tasks.store.kubernetes import conditions
from mcp_tasks.store.kubernetes.resources import (
    API_VERSION,
    TASK_KIND,
    TENANT_LABEL,
    TOOL_LABEL,
    ArgumentsArtifact,
    LeaseCall,
    McpTaskSpec,
    McpTaskStatus,
    TaskLease,
    TaskOwner,
    label_value,
)
from mcp_tasks.tasks.errors import WrongWriter
from mcp_tasks.tasks.ids import TaskId
from mcp_tasks.tasks.interfaces import Writer
from mcp_tasks.tasks.owner import UNKNOWN_ISSUER, Owner
from mcp_tasks.tasks.record import ArgumentsRef, Lease, LeaseProcess, TaskRecord, iso_ms, to_epoch_ms


class ImmutableFieldChanged(ValueError):
    """A record change touched a field that is fixed at creation (owner, tool, arguments, createdAt, ...)."""


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _opt_time(text: str | None) -> datetime | None:
    return None if text is None else _time(text)


def _opt_iso(moment: datetime | None) -> str | None:
    return None if moment is None else iso_ms(moment)


def spec_for_new(record: TaskRecord) -> McpTaskSpec:
    """The `spec` of a task being created."""
    return McpTaskSpec(
        owner=TaskOwner(tenant=record.owner.tenant, subject=record.owner.subject, issuer=record.owner.issuer),
        tool=record.tool,
        arguments=record.arguments,
        arguments_ref=None
        if record.arguments_ref is None
        else ArgumentsArtifact(
            name=record.arguments_ref.name,
            size_bytes=record.arguments_ref.size_bytes,
            sha256=record.arguments_ref.sha256,
        ),
        created_at=iso_ms(record.created_at),
        ttl_ms=record.ttl_ms,
        poll_interval_ms=record.poll_interval_ms,
        pre_input_responses=record.pre_input_responses,
        client_capabilities=record.client_capabilities,
        traceparent=record.traceparent,
        watched_until=_opt_iso(record.watched_until),
        input_responses=record.input_responses,
        cancel_requested=record.cancel_requested_at is not None,
        cancel_requested_at=_opt_iso(record.cancel_requested_at),
        cancel_requested_by=record.cancel_requested_by,
    )


def new_object(record: TaskRecord, namespace: str) -> JsonObject:
    """The McpTask to POST for a new task: name = taskId, tenant and tool labels, `spec` only.

    No `app.kubernetes.io/managed-by` label: every McpTask is mcp-tasks' by its kind, and the label
    would be 44 more bytes of every retained task (objects created by earlier versions keep it).
    """
    return {
        "apiVersion": API_VERSION,
        "kind": TASK_KIND,
        "metadata": {
            "name": record.task_id,
            "namespace": namespace,
            "labels": {
                TENANT_LABEL: label_value(record.owner.tenant),
                TOOL_LABEL: label_value(record.tool),
            },
        },
        "spec": dump(spec_for_new(record)),
    }


_OMITTED_WHEN_EMPTY: Final = frozenset(
    {"inputResponses", "preInputResponses", "inputRequests", "issuedInputKeys", "attempt", "inputWaitMs"}
)
"""Fields of `spec` and `status` left out while empty (`{}`, `[]`, 0): parsing gives the same default back,
and the CRD declares no default for them, so the API server does not store them either. Most retained
McpTasks are finished ones that never asked for input; these are some 130 of their bytes."""


def dump(model: McpTaskSpec | McpTaskStatus) -> JsonObject:
    """Serialize a spec or status the way the API server stores it: camelCase, no nulls, and the fields of
    `_OMITTED_WHEN_EMPTY` only when they hold something.
    """
    dumped = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return {key: value for key, value in dumped.items() if key not in _OMITTED_WHEN_EMPTY or value}


def parse_spec(obj: JsonObject) -> McpTaskSpec:
    """`obj.spec` as a model (raises pydantic `ValidationError` when it is not an McpTask spec)."""
    return McpTaskSpec.model_validate(obj.get("spec") or {})


def parse_status(obj: JsonObject) -> McpTaskStatus:
    """`obj.status` as a model; an absent status is a fresh `working` task."""
    return McpTaskStatus.model_validate(obj.get("status") or {})


@dataclass(frozen=True, slots=True)
class Parsed:
    """One McpTask object at one `resourceVersion`, parsed once: its `spec` and `status` models, its
    `metadata.generation`, and the task record they view. The store keeps it beside the cached object,
    and `plan_write` plans a change against it (no re-parse per write).
    """

    spec: McpTaskSpec
    status: McpTaskStatus
    generation: int
    record: TaskRecord


def parse(obj: JsonObject, legacy_issuer: str = UNKNOWN_ISSUER) -> Parsed:
    """Parse an McpTask object (see the module docstring for the view rules).

    Fields this version does not know are kept on the models (`resources._Stored`), never refused.
    An owner without an issuer (created before owners named it) reads as owned through `legacy_issuer`.

    Raises:
        pydantic.ValidationError: the object is not a well-formed McpTask.
        KeyError: it has no `metadata.name` or `metadata.resourceVersion`.
    """
    spec = parse_spec(obj)
    status = parse_status(obj)
    metadata = obj["metadata"]
    record = _view(str(metadata["name"]), str(metadata["resourceVersion"]), spec, status, legacy_issuer)
    return Parsed(spec, status, int(metadata.get("generation") or 0), record)


def to_record(obj: JsonObject, legacy_issuer: str = UNKNOWN_ISSUER) -> TaskRecord:
    """The task record an McpTask object represents (`parse(obj, legacy_issuer).record`).

    Raises:
        pydantic.ValidationError: the object is not a well-formed McpTask.
    """
    return parse(obj, legacy_issuer).record


def owner_of(owner: TaskOwner, legacy_issuer: str) -> Owner:
    """The `Owner` `spec.owner` names; one stored without an issuer is owned through `legacy_issuer`."""
    return Owner(tenant=owner.tenant, subject=owner.subject, issuer=owner.issuer or legacy_issuer)


def _view(
    name: str, version: str, spec: McpTaskSpec, status: McpTaskStatus, legacy_issuer: str = UNKNOWN_ISSUER
) -> TaskRecord:
    answered = spec.input_responses
    pending = {key: request for key, request in status.input_requests.items() if key not in answered}
    unconsumed = {key: answered[key] for key in status.input_requests if key in answered}
    # consumed: answered, issued, and no longer in status.inputRequests (the spec keeps every answer)
    taken = {key: answered[key] for key in status.issued_input_keys if key in answered and key not in unconsumed}
    task_status = status.task_status
    if task_status is TaskStatus.INPUT_REQUIRED and not pending:
        task_status = TaskStatus.WORKING
    created_at = _time(spec.created_at)
    moments = [
        _time(status.last_updated_at) if status.last_updated_at else created_at,
        *(_time(t) for t in (spec.last_answered_at, spec.cancel_requested_at) if t is not None),
    ]
    waited_ms, waiting_since = status.input_wait_ms, _opt_time(status.input_required_since)
    if waiting_since is not None and task_status is not TaskStatus.INPUT_REQUIRED:
        # answered through the spec (a client write): the wait ended when the last answer came
        ended = _opt_time(spec.last_answered_at) or max(moments)
        waited_ms += max(0, to_epoch_ms(ended) - to_epoch_ms(waiting_since))
        waiting_since = None
    return TaskRecord(
        task_id=TaskId(name),
        owner=owner_of(spec.owner, legacy_issuer),
        tool=spec.tool,
        arguments=spec.arguments,
        arguments_ref=None
        if spec.arguments_ref is None
        else ArgumentsRef(spec.arguments_ref.name, spec.arguments_ref.size_bytes, spec.arguments_ref.sha256),
        status=task_status,
        created_at=created_at,
        last_updated_at=max(moments),
        ttl_ms=status.ttl_ms or spec.ttl_ms,
        retention_ms=spec.ttl_ms,
        poll_interval_ms=spec.poll_interval_ms,
        status_message=status.status_message,
        progress=status.progress,
        input_requests=pending,
        issued_input_keys=tuple(status.issued_input_keys),
        input_round_digest=status.input_round_digest,
        input_responses=unconsumed,
        taken_input_responses={} if task_status.is_terminal else taken,
        pre_input_responses=spec.pre_input_responses,
        client_capabilities=spec.client_capabilities,
        traceparent=spec.traceparent,
        watched_until=_opt_time(spec.watched_until),
        cancel_requested_at=(_opt_time(spec.cancel_requested_at) or created_at) if spec.cancel_requested else None,
        cancel_requested_by=spec.cancel_requested_by,
        result=status.result,
        error=status.error,
        lease=None if status.lease is None else _lease(status.lease),
        attempt=status.attempt,
        input_wait_ms=waited_ms,
        input_required_since=waiting_since,
        version=version,
    )


def _lease(lease: TaskLease) -> Lease:
    call = lease.call
    process = None if call is None else LeaseProcess(0, "", call.execution_id, 0, warm_endpoint=call.endpoint)
    return Lease(lease.holder, _time(lease.expires_at), process)


def _task_lease(lease: Lease) -> TaskLease:
    """`status.lease`; only a warm call on a pod is kept of `lease.process` (nothing local runs here)."""
    process = lease.process
    call = None
    if process is not None and process.warm_endpoint is not None:
        call = LeaseCall(execution_id=process.execution_id, endpoint=process.warm_endpoint)
    return TaskLease(holder=lease.holder, expires_at=iso_ms(lease.expires_at), call=call)


@dataclass(frozen=True, slots=True)
class WritePlan:
    """What to send for one record change: a new `spec` (main resource) and/or `status` (subresource)."""

    spec: McpTaskSpec | None
    status: McpTaskStatus | None


def _comparable(record: TaskRecord) -> TaskRecord:
    """The record as storage keeps it: times at millisecond precision, no version."""

    def ms(moment: datetime) -> datetime:
        return _time(iso_ms(moment))

    return dataclasses.replace(
        record,
        version="",
        created_at=ms(record.created_at),
        last_updated_at=ms(record.last_updated_at),
        cancel_requested_at=None if record.cancel_requested_at is None else ms(record.cancel_requested_at),
        input_required_since=None if record.input_required_since is None else ms(record.input_required_since),
        watched_until=None if record.watched_until is None else ms(record.watched_until),
        lease=None
        if record.lease is None
        else dataclasses.replace(record.lease, expires_at=ms(record.lease.expires_at)),
    )


_FIXED_AT_CREATION: Final = (
    "owner",
    "tool",
    "arguments",
    "arguments_ref",
    "poll_interval_ms",
    "pre_input_responses",
    "traceparent",
)
"""Record fields no write may change once the McpTask exists (and `created_at`, at storage precision)."""


def plan_write(current: Parsed, record: TaskRecord, writer: Writer) -> WritePlan:
    """The write that stores `record`, `writer`'s change of the task as `current` holds it.

    A client's change (answers, cancel requests, an input round's capabilities and watch) lands in
    `spec`; an executor's in the status subresource. So each record change is one compare-and-swap
    write, to the part its writer owns. Both are checked on the parsed form: the spec the record asks
    for, viewed with the stored status, must give the record back (a client write), or equal the stored
    spec (an executor write).

    Raises:
        ImmutableFieldChanged: the change touches a field fixed at creation.
        WrongWriter: a client change that needs a status write, or an executor change of `spec`.
    """
    before = current.record
    for name in _FIXED_AT_CREATION:
        if getattr(record, name) != getattr(before, name):
            raise ImmutableFieldChanged(f"task {record.task_id}: {name} is fixed at creation")
    if iso_ms(record.created_at) != iso_ms(before.created_at):
        raise ImmutableFieldChanged(f"task {record.task_id}: created_at is fixed at creation")
    new_spec = _client_spec(current.spec, record)
    if writer is Writer.CLIENT:
        viewed = dataclasses.replace(
            _view(record.task_id, record.version, new_spec, current.status), owner=before.owner
        )
        if _comparable(viewed) != _comparable(record):
            raise WrongWriter(f"task {record.task_id}: a client write changed what the executor reports (status)")
        return WritePlan(spec=None if new_spec == current.spec else new_spec, status=None)
    if new_spec != current.spec:
        raise WrongWriter(f"task {record.task_id}: an executor write changed the client's intent (spec)")
    return WritePlan(spec=None, status=_executor_status(current, record))


def _client_spec(spec: McpTaskSpec, record: TaskRecord) -> McpTaskSpec:
    """`spec` with the client intent `record` holds: answers, the caller's watch and capabilities, a cancel."""
    answers = {**spec.input_responses, **record.input_responses}
    update: dict[str, object] = {
        "input_responses": answers,
        "last_answered_at": iso_ms(record.last_updated_at)
        if answers != spec.input_responses
        else spec.last_answered_at,
        "watched_until": _opt_iso(record.watched_until),
        # client intent too: an input round of a synchronous run speaks for its own capabilities
        "client_capabilities": record.client_capabilities,
    }
    if not spec.cancel_requested:  # a cancel request is one-way; one set by hand (kubectl) has no time or author
        update.update(
            cancel_requested=record.cancel_requested_at is not None,
            cancel_requested_at=_opt_iso(record.cancel_requested_at),
            cancel_requested_by=record.cancel_requested_by,
        )
    return spec.model_copy(update=update)


def _executor_status(current: Parsed, record: TaskRecord) -> McpTaskStatus:
    """The status subresource that stores what `record` reports, keeping answered-but-unconsumed requests."""
    stored = current.status
    kept_requests = {key: stored.input_requests[key] for key in record.input_responses if key in stored.input_requests}
    phase = record.status
    if kept_requests and phase is TaskStatus.WORKING:
        phase = TaskStatus.INPUT_REQUIRED  # answered, not yet consumed: reads as `working` (see _view)
    return McpTaskStatus(
        **(stored.model_extra or {}),  # a newer version's status fields, written back as read
        task_status=phase,
        status_message=record.status_message,
        progress=record.progress,
        last_updated_at=iso_ms(record.last_updated_at),
        ttl_ms=None if record.ttl_ms == current.spec.ttl_ms else record.ttl_ms,
        input_requests={**kept_requests, **record.input_requests},
        issued_input_keys=list(record.issued_input_keys),
        input_round_digest=record.input_round_digest,
        result=record.result,
        error=record.error,
        lease=None if record.lease is None else _task_lease(record.lease),
        attempt=record.attempt,
        input_wait_ms=record.input_wait_ms,
        input_required_since=_opt_iso(record.input_required_since),
        conditions=conditions.task_conditions(record, stored.conditions, current.generation),
    )
