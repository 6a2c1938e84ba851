"""Prometheus metrics of every component, defined once (`prometheus-client`), exported by role.

The embedded server, the gateway and the operator record the same names for the same meaning, so one
dashboard reads all three. Each family is defined unregistered; a process exports the families of its
roles only (`families(*roles)`, registered by `observability.install`): a gateway does not export the
operator's Job, reconcile, leadership or sweep families (at 0, they would read as an executor that
never swept), and a family recorded outside its roles is simply not exported.

Conventions: counters end in `_total`, durations are `_seconds`, base units only. Label values are
bounded: a method outside the served set is `other`, tools are the declared tool names, statuses the
five task statuses; never a task id, and a tenant only when the operator listed it
(`MCPTASKS_METRICS_TENANTS`; every other tenant is `other`).

Every family, its labels and meaning are listed in `docs/operations.md` §Metrics.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Final, Literal

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase

from mcp_tasks.protocol.models import TaskStatus
from mcp_tasks.tasks.interfaces import Unfinished
from mcp_tasks.tasks.record import TaskRecord

_FAST: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_SLOW: Final = (0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 14400.0)

REQUESTS: Final = Counter(
    "mcptasks_requests_total", "MCP requests answered, by method and outcome", ["method", "code"], registry=None
)
REQUEST_SECONDS: Final = Histogram(
    "mcptasks_request_duration_seconds", "Time to answer an MCP request", ["method"], buckets=_FAST, registry=None
)
AUTH_REFUSALS: Final = Counter(
    "mcptasks_auth_refusals_total",
    "Requests refused by authentication or authorisation, by reason (gateway.identity.principal.RefusalReason)",
    ["reason"],
    registry=None,
)
TASKS_CREATED: Final = Counter(
    "mcptasks_tasks_created_total", "Tasks created (visible or hidden)", ["tool"], registry=None
)
TRANSITIONS: Final = Counter(
    "mcptasks_task_transitions_total", "Writes that moved a task into a status", ["tool", "status"], registry=None
)
FINISHED: Final = Counter(
    "mcptasks_tasks_finished_total",
    "Tasks that reached a terminal status, by how they ended",
    ["tool", "status", "reason"],
    registry=None,
)
QUEUE_SECONDS: Final = Histogram(
    "mcptasks_task_queue_seconds",
    "From task creation to the first start of a run",
    ["tool"],
    buckets=_SLOW,
    registry=None,
)
DURATION_SECONDS: Final = Histogram(
    "mcptasks_task_duration_seconds", "From task creation to a terminal status", ["tool"], buckets=_SLOW, registry=None
)
INPUT_WAIT_SECONDS: Final = Histogram(
    "mcptasks_task_input_wait_seconds", "Time a task waited in input_required", ["tool"], buckets=_SLOW, registry=None
)
TASKS: Final = Gauge(
    "mcptasks_tasks", "Non-terminal tasks by status, as the executor's store sees them", ["status"], registry=None
)
OLDEST_UNFINISHED: Final = Gauge(
    "mcptasks_unfinished_task_max_age_seconds",
    "Age of the oldest non-terminal task (0 when there is none)",
    registry=None,
)
SWEEP_TIMESTAMP: Final = Gauge(
    "mcptasks_sweep_timestamp_seconds",
    "When the executor (runner or operator) last completed a sweep, Unix time",
    registry=None,
)
RUNS_STARTED: Final = Counter(
    "mcptasks_runs_started_total",
    "Runs started (local processes, Jobs or calls on warm workers)",
    ["tool"],
    registry=None,
)
WARM_WORKER_STARTS: Final = Counter(
    "mcptasks_warm_worker_starts_total", "Warm worker processes started by the embedded runner", ["tool"], registry=None
)
WARM_CALLS: Final = Counter(
    "mcptasks_warm_calls_total",
    "Calls sent to warm workers, by outcome (result, error, cancelled, crashed, lost, unavailable)",
    ["tool", "outcome"],
    registry=None,
)
JOBS_CREATED: Final = Counter("mcptasks_jobs_created_total", "Kubernetes Jobs created by the operator", registry=None)
JOBS_DELETED: Final = Counter("mcptasks_jobs_deleted_total", "Kubernetes Jobs deleted by the operator", registry=None)
WORKER_API: Final = Counter(
    "mcptasks_worker_api_requests_total", "Worker API calls by route and HTTP status", ["route", "code"], registry=None
)
OPEN_STREAMS: Final = Gauge("mcptasks_open_streams", "Open SSE streams", ["kind"], registry=None)
STORE_SECONDS: Final = Histogram(
    "mcptasks_store_operation_duration_seconds",
    "Task store and API server request latency",
    ["store", "operation"],
    buckets=_FAST,
    registry=None,
)
EVENTS_DROPPED: Final = Counter(
    "mcptasks_events_dropped_total", "Kubernetes Events not written (queue full or API error)", registry=None
)
RECONCILE_SECONDS: Final = Histogram(
    "mcptasks_reconcile_duration_seconds",
    "Time of one reconcile of one McpTask",
    ["outcome"],
    buckets=_FAST,
    registry=None,
)
RECONCILE_QUEUE: Final = Gauge("mcptasks_reconcile_queue_depth", "McpTasks waiting to be reconciled now", registry=None)
STORE_CONFLICTS: Final = Counter(
    "mcptasks_store_conflicts_total", "Compare-and-swap conflicts", ["store"], registry=None
)

TASKS_QUEUED: Final = Gauge(
    "mcptasks_tasks_queued",
    "Unfinished tasks waiting for a slot (never run yet), by tenant: a listed tenant (MCPTASKS_METRICS_TENANTS) "
    "or other",
    ["tenant"],
    registry=None,
)
TASKS_RUNNING: Final = Gauge(
    "mcptasks_tasks_running",
    "Unfinished tasks under a worker lease (running, or waiting for input on a run), by tenant (listed or other)",
    ["tenant"],
    registry=None,
)
LIMIT_REFUSALS: Final = Counter(
    "mcptasks_limit_refusals_total",
    "Requests refused by a limit (the setting's name: max_unfinished_per_principal, task_create_rate_per_principal, "
    "task_create_rate_per_tenant, max_running_per_tenant, max_running_per_principal), by tenant (listed or other)",
    ["limit", "tenant"],
    registry=None,
)
FAST_POLLS: Final = Counter(
    "mcptasks_fast_polls_total",
    "tasks/get reads of a task sooner than its pollIntervalMs after the previous read on this replica (served)",
    ["tenant"],
    registry=None,
)

OPERATOR_LEADER: Final = Gauge(
    "mcptasks_operator_leader",
    "1 while this operator replica holds the leader Lease and reconciles, else 0 (a standby)",
    registry=None,
)

Role = Literal["gateway", "runner", "operator"]
"""What a process does: serves MCP (`gateway`), runs tasks itself (`runner`: the embedded executor, also
`mcptasks gateway --runner local`), or is the Kubernetes operator (`operator`)."""

_EVERY_ROLE: Final[tuple[MetricWrapperBase, ...]] = (
    TASKS_CREATED,
    TRANSITIONS,
    FINISHED,
    QUEUE_SECONDS,
    DURATION_SECONDS,
    INPUT_WAIT_SECONDS,
    STORE_SECONDS,
    STORE_CONFLICTS,
)
_EXECUTOR: Final[tuple[MetricWrapperBase, ...]] = (
    TASKS,
    TASKS_QUEUED,
    TASKS_RUNNING,
    LIMIT_REFUSALS,
    OLDEST_UNFINISHED,
    SWEEP_TIMESTAMP,
    RUNS_STARTED,
    WARM_CALLS,
    WORKER_API,
)
_ROLE_FAMILIES: Final[dict[Role, tuple[MetricWrapperBase, ...]]] = {
    "gateway": (REQUESTS, REQUEST_SECONDS, AUTH_REFUSALS, OPEN_STREAMS, WARM_CALLS, LIMIT_REFUSALS, FAST_POLLS),
    "runner": (*_EXECUTOR, WARM_WORKER_STARTS),
    "operator": (
        *_EXECUTOR,
        JOBS_CREATED,
        JOBS_DELETED,
        EVENTS_DROPPED,
        RECONCILE_SECONDS,
        RECONCILE_QUEUE,
        OPERATOR_LEADER,
    ),
}


def families(*roles: Role) -> list[MetricWrapperBase]:
    """The metric families a process with `roles` exports, each once, in definition order."""
    chosen: list[MetricWrapperBase] = list(_EVERY_ROLE)
    for role in roles:
        chosen.extend(family for family in _ROLE_FAMILIES[role] if family not in chosen)
    return chosen


_UNFINISHED: Final = tuple(status for status in TaskStatus if not status.is_terminal)


def method_label(method: str | None, served: Iterable[str]) -> str:
    """`method` when it is one we serve (bounded label values), `other` otherwise, `none` when unparsed."""
    if method is None:
        return "none"
    return method if method in served else "other"


def record_write(before: TaskRecord | None, after: TaskRecord) -> None:
    """A task store's write observer (`observability.record_writes`): creations, transitions and timings."""
    tool = after.tool
    if before is None:
        TASKS_CREATED.labels(tool).inc()
        return
    if before.attempt == 0 and after.attempt > 0:
        QUEUE_SECONDS.labels(tool).observe(max(0.0, (after.last_updated_at - after.created_at).total_seconds()))
    if after.status is before.status:
        return
    TRANSITIONS.labels(tool, after.status.value).inc()
    if before.status is TaskStatus.INPUT_REQUIRED:
        waited = (after.last_updated_at - before.last_updated_at).total_seconds()
        INPUT_WAIT_SECONDS.labels(tool).observe(max(0.0, waited))
    if after.status.is_terminal:
        FINISHED.labels(tool, after.status.value, after.finished_reason).inc()
        DURATION_SECONDS.labels(tool).observe(max(0.0, (after.last_updated_at - after.created_at).total_seconds()))


def swept(unfinished: Unfinished, now: datetime) -> None:
    """After an executor's sweep: `mcptasks_tasks{status}` (absent statuses 0), the oldest task's age,
    and the sweep's time.
    """
    for status in _UNFINISHED:
        TASKS.labels(status.value).set(unfinished.counts.get(status.value, 0))
    oldest = unfinished.oldest_created_at
    OLDEST_UNFINISHED.set(0.0 if oldest is None else max(0.0, (now - oldest).total_seconds()))
    SWEEP_TIMESTAMP.set(now.timestamp())


OTHER_TENANTS: Final = "other"
"""The `tenant` label of every tenant not listed in `MCPTASKS_METRICS_TENANTS` (labels stay bounded)."""


def tenant_label(tenant: str, listed: frozenset[str]) -> str:
    """`tenant` when the operator listed it for labels, else `other`."""
    return tenant if tenant in listed else OTHER_TENANTS


def tenants_counted(counts: dict[str, tuple[int, int]], listed: frozenset[str]) -> None:
    """Set `mcptasks_tasks_queued` and `mcptasks_tasks_running` from tenant → (queued, running); each listed
    tenant and `other` always have a value (0 when none).
    """
    totals: dict[str, list[int]] = {label: [0, 0] for label in (*listed, OTHER_TENANTS)}
    for tenant, (queued, running) in counts.items():
        total = totals[tenant_label(tenant, listed)]
        total[0] += queued
        total[1] += running
    for label, (queued, running) in totals.items():
        TASKS_QUEUED.labels(label).set(queued)
        TASKS_RUNNING.labels(label).set(running)


def timed(store: str, operation: str) -> Callable[[], None]:
    """Start timing one store operation; call the returned function when it ends."""
    started = time.perf_counter()
    return lambda: STORE_SECONDS.labels(store, operation).observe(time.perf_counter() - started)
