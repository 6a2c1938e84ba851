"""The operator's admission without a cluster: which queued tasks get a Job (or a warm call) from the copies of
Jobs and pods and the task cache, what the others are told, and what `decide` makes of it (our own choices:
docs/kubernetes.md §Limits and admission)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mcp_tasks.operator import decide as d
from mcp_tasks.operator import kueue
from mcp_tasks.operator.admission import Admission, holds_slot, shown_ahead
from mcp_tasks.operator.children import Children
from mcp_tasks.operator.kueue import QueueNames
from mcp_tasks.operator.settings import OperatorSettings
from mcp_tasks.tasks import fair_share, transitions
from mcp_tasks.tasks.fair_share import Queued
from mcp_tasks.tasks.ids import mint_task_id
from mcp_tasks.tasks.limits import LimitSettings
from mcp_tasks.tasks.owner import Owner
from mcp_tasks.tasks.record import Lease, TaskRecord
from mcp_tasks.tasks.tools import ToolSpec, WarmSpec
from tests.unit.manifests import tool_spec

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
TOOL = tool_spec({"image": "example.org/t:1", "command": ["run"]})
WARM = dataclasses.replace(
    TOOL, manifest=TOOL.manifest.model_copy(update={"warm": WarmSpec.model_validate({"minWorkers": 1})})
)
ALICE = Owner("a", "alice", "static")
ANNA = Owner("a", "anna", "static")
BOB = Owner("b", "bob", "static")


class Catalog:
    def __init__(self, tool: ToolSpec = TOOL) -> None:
        self.tool = tool

    def list_tools(self) -> Sequence[ToolSpec]:
        return [self.tool]

    def get_tool(self, name: str) -> ToolSpec | None:
        return self.tool if name == self.tool.name else None


class Cache:
    """The McpTask cache as the admission reads it."""

    def __init__(self) -> None:
        self.records: dict[str, TaskRecord] = {}

    def unfinished_records(self) -> list[TaskRecord]:
        return [record for record in self.records.values() if not record.status.is_terminal]

    def owner_of(self, task_id: str) -> Owner | None:
        record = self.records.get(task_id)
        return None if record is None else record.owner

    def add(self, owner: Owner, created_s: float) -> TaskRecord:
        record = transitions.new_task(mint_task_id(), owner, TOOL, {}, T0 + timedelta(seconds=created_s))
        self.records[record.task_id] = record
        return record


def job(task_id: str, outcome: str | None = None, queue: str | None = None, suspend: bool = False) -> dict[str, Any]:
    labels = {"mcptasks.io/task-id": task_id, **({kueue.QUEUE_NAME_LABEL: queue} if queue else {})}
    conditions = [] if outcome is None else [{"type": outcome, "status": "True"}]
    body: dict[str, Any] = {
        "metadata": {"name": f"mcptask-{task_id}", "uid": task_id, "resourceVersion": "1", "labels": labels},
        "status": {"conditions": conditions},
    }
    if suspend:
        body["spec"] = {"suspend": True}
    return body


class Harness:
    def __init__(self, cap: int = 2, limits: LimitSettings | None = None, **settings: Any) -> None:
        self.cache = Cache()
        self.children = Children()
        self.woken: list[str] = []
        self.admission = Admission(
            self.cache,
            self.children,
            Catalog(settings.pop("tool", TOOL)),
            OperatorSettings(max_running_tasks=cap, **settings),
            limits or LimitSettings(),
            lambda: T0 + timedelta(hours=1),
            self.woken.append,
        )

    def start(self, task_id: str) -> None:
        """What the reconcile does with an admitted task: create its Job (into the copies at once)."""
        assert self.admission.verdict(self.cache.records[task_id], TOOL) is None, "not admitted"
        self.children.job_event("ADDED", job(task_id))

    def end(self, task_id: str) -> None:
        self.children.job_event(
            "MODIFIED", {**job(task_id, "Complete"), "metadata": {**job(task_id)["metadata"], "resourceVersion": "2"}}
        )
        self.cache.records[task_id] = transitions.complete(self.cache.records[task_id], {"content": []}, T0)

    def message(self, task_id: str) -> str | None:
        return self.admission.verdict(self.cache.records[task_id], TOOL)


def test_eight_long_tasks_of_one_tenant_delay_another_tenants_task_by_one_slot_at_most() -> None:
    """Cap 2: A's 8 tasks come first and take both slots; B's task, created after them, takes the next slot
    that frees (not A's third), and each waiting task is told its place among its own tenant's tasks only."""
    h = Harness(cap=2)
    a = [h.cache.add(ALICE, i).task_id for i in range(8)]
    assert h.admission.assess() == a[:2]
    for task_id in a[:2]:
        h.start(task_id)
    b = h.cache.add(BOB, 10).task_id
    assert h.admission.assess() == []
    assert h.message(b) == "queued: next in line for a slot"
    assert h.message(a[2]) == "queued: next in line for a slot"
    assert h.message(a[7]) == "queued: 5 of your tenant's tasks ahead"
    assert set(h.woken) >= {b, *a[2:]}, "each waiting task is woken to write its message"
    assert h.admission.tenant_counts() == {"a": (6, 2), "b": (1, 0)}, "the metrics' count: (queued, running)"
    h.end(a[0])
    assert h.admission.assess() == [b], "the freed slot is B's: A runs 1, B runs 0"
    h.start(b)
    h.end(a[1])
    assert h.admission.assess() == [a[2]]
    assert h.message(a[3]) == "queued: next in line for a slot"


def test_the_count_comes_from_the_jobs_that_exist_so_a_new_leader_admits_nothing_over_the_cap() -> None:
    """A fresh admission (an operator restarted, or a new leader) with 2 Jobs running and cap 2 admits
    nothing; an ended Job or one deleted with its pods gone frees its slot, a pod still stopping does not."""
    h = Harness(cap=2)
    running = [h.cache.add(ALICE, i).task_id for i in range(2)]
    waiting = h.cache.add(BOB, 5).task_id
    for task_id in running:
        h.children.job_event("ADDED", job(task_id))
    assert h.admission.assess() == []
    assert h.message(waiting) == "queued: next in line for a slot"
    h.children.job_event("DELETED", job(running[0]))
    stopping = {"metadata": {"name": "p", "resourceVersion": "3", "labels": {"mcptasks.io/task-id": running[0]}}}
    h.children.pod_event("ADDED", {**stopping, "status": {"phase": "Running"}})
    assert h.admission.assess() == [], "its pod still runs (SIGTERM, grace period)"
    h.children.pod_event("DELETED", stopping)
    assert h.admission.assess() == [waiting]


def test_a_tenant_at_its_running_budget_waits_while_others_start_and_is_told_why() -> None:
    """No cap, `max_running_per_tenant` 1: A's second task waits, saying its tenant is at its limit; B's
    starts at once; A's second starts when A's first ends."""
    h = Harness(cap=0, limits=LimitSettings(max_running_per_tenant=1))
    first, second = h.cache.add(ALICE, 0).task_id, h.cache.add(ANNA, 1).task_id
    assert h.admission.assess() == [first]
    h.start(first)
    other = h.cache.add(BOB, 2).task_id
    assert h.admission.assess() == [other]
    held = fair_share.queued_message(0, "max_running_per_tenant")
    assert h.message(second) == held and "max_running_per_tenant" in held
    h.end(first)
    assert h.admission.assess() == [second]


def test_warm_calls_under_a_live_lease_count_and_re_runs_do_not_wait() -> None:
    h = Harness(cap=1, tool=WARM)
    warm = h.cache.add(ALICE, 0)
    h.cache.records[warm.task_id] = dataclasses.replace(warm, lease=Lease("op", T0 + timedelta(hours=2)), attempt=1)
    fresh = h.cache.add(BOB, 1).task_id
    assert h.admission.assess() == []
    rerun = dataclasses.replace(h.cache.add(ALICE, 2), attempt=1)
    assert h.admission.verdict(rerun, WARM) is None, "a re-run held a slot: it does not queue again"
    h.cache.records[warm.task_id] = dataclasses.replace(warm, lease=Lease("op", T0), attempt=1)  # expired
    assert h.admission.assess() == [fresh]


def test_a_standby_replica_admits_nothing_it_admitted_while_it_led() -> None:
    """Only the leader admits (the warm runner runs on every replica): a replica that stopped leading holds
    every task, and one that leads again counts afresh."""
    h = Harness(cap=2)
    record = h.cache.add(ALICE, 0)
    assert h.admission.assess() == [record.task_id]
    h.admission.leading = asyncio.Event()  # lost the Lease
    assert h.admission.verdict(record, TOOL) == d.HELD
    h.admission.leading.set()
    h.admission.reset()
    assert h.admission.verdict(record, TOOL) == d.HELD, "not placed since it leads again"
    assert h.admission.assess() == [record.task_id]
    assert h.admission.verdict(record, TOOL) is None


def test_without_a_cap_or_budget_nothing_is_held() -> None:
    h = Harness(cap=0)
    record = h.cache.add(ALICE, 0)
    assert not h.admission.enabled
    assert h.admission.verdict(record, TOOL) is None


def test_kueue_tasks_are_left_to_kueue_and_their_jobs_not_counted() -> None:
    h = Harness(cap=1, kueue_enabled=True, kueue_tenant_queues=QueueNames({"b": "team-b"}))
    ours = h.cache.add(ALICE, 0).task_id
    theirs = h.cache.add(BOB, 1)
    assert h.admission.verdict(theirs, TOOL) is None, "Kueue admits B's Jobs"
    h.children.job_event("ADDED", job(theirs.task_id, queue="team-b", suspend=True))
    assert h.admission.assess() == [ours], "B's Kueue Job holds none of the operator's slots"


def test_a_long_queue_is_told_its_place_rounded_up_beyond_twenty() -> None:
    assert [shown_ahead(n) for n in (0, 19, 20, 21, 99, 100, 101, 999, 5000)] == [
        0,
        19,
        20,
        30,
        100,
        100,
        200,
        1000,
        1000,
    ]
    h = Harness(cap=1)
    tasks = [h.cache.add(ALICE, i) for i in range(40)]
    h.admission.assess()
    h.start(tasks[0].task_id)
    h.admission.assess()
    queued = [Queued(t.task_id, t.owner, t.created_at) for t in tasks[1:]]
    for task in queued[:20]:
        assert h.message(task.task_id) == fair_share.queued_message(fair_share.ahead(task, queued)), "exact below 20"
    assert h.message(tasks[25].task_id) == "queued: 30 of your tenant's tasks ahead"


def test_holds_slot() -> None:
    running_pod = {"metadata": {"name": "p"}, "status": {"phase": "Running"}}
    done_pod = {"metadata": {"name": "p"}, "status": {"phase": "Succeeded"}}
    deleting = job("x")
    deleting["metadata"]["deletionTimestamp"] = "2026-12-01T12:00:00Z"
    assert holds_slot(job("x"), [])
    assert not holds_slot(job("x", "Complete"), [done_pod])
    assert holds_slot(job("x", "Complete"), [running_pod])
    assert not holds_slot(deleting, [])
    assert holds_slot(None, [running_pod])


SETTINGS = OperatorSettings(start_deadline_s=300)


def stamp(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize(
    ("status_message", "waiting", "expected"),
    [
        (None, None, (d.CreateJob(),)),
        (None, "queued: next in line for a slot", (d.StatusMessage("queued: next in line for a slot"),)),
        ("queued: next in line for a slot", "queued: next in line for a slot", ()),
        (None, d.HELD, ()),
    ],
)
def test_decide_creates_the_job_only_once_admitted_and_writes_a_waiting_message_once(
    status_message: str | None, waiting: str | None, expected: tuple[d.Action, ...]
) -> None:
    record = dataclasses.replace(Cache().add(ALICE, 0), status_message=status_message)
    plan = d.decide(record, None, [], TOOL, T0 + timedelta(seconds=1), SETTINGS, waiting)
    assert plan.actions == expected and plan.requeue_after_s is None


def without_renewal(plan: d.Plan) -> tuple[d.Action, ...]:
    return tuple(action for action in plan.actions if not isinstance(action, d.RenewTtl))


def test_decide_waits_on_a_suspended_kueue_job_without_a_start_deadline_then_clears_the_message() -> None:
    record = dataclasses.replace(Cache().add(BOB, 0), attempt=1)
    suspended = {
        **job("x", queue="team-b", suspend=True),
        "metadata": {**job("x")["metadata"], "creationTimestamp": stamp(0)},
    }
    suspended["metadata"]["labels"][kueue.QUEUE_NAME_LABEL] = "team-b"
    hours_later = T0 + timedelta(hours=3)
    plan = d.decide(record, suspended, [], TOOL, hours_later, SETTINGS)
    assert without_renewal(plan) == (d.StatusMessage("queued: waiting for Kueue to admit its Job (LocalQueue team-b)"),)
    said = dataclasses.replace(record, status_message=kueue.waiting_message("team-b"))
    assert without_renewal(d.decide(said, suspended, [], TOOL, hours_later, SETTINGS)) == ()
    admitted = {**suspended, "spec": {}, "status": {"startTime": stamp(3 * 3600 - 10)}}
    plan = d.decide(said, admitted, [], TOOL, hours_later, SETTINGS)
    assert without_renewal(plan) == (d.StatusMessage(None),), "admitted: no longer queued, and no StartTimeout yet"
    assert plan.requeue_after_s == pytest.approx(290, abs=0.01), "the start deadline runs from its admission"
