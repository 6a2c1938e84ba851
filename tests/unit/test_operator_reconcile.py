"""The operator's reconcile, without a cluster: `decide` as a table over every state it can meet, the
work queue's guarantees, the trimmed copies of Jobs and pods, and the leader Lease's record."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mcp_tasks.operator import decide as d
from mcp_tasks.operator.children import Children
from mcp_tasks.operator.leadership import LeaseRecord, held_until, micro_time
from mcp_tasks.operator.settings import OperatorSettings
from mcp_tasks.operator.workqueue import ShutDown, WorkQueue
from mcp_tasks.protocol.models import TaskStatus
from mcp_tasks.tasks import transitions
from mcp_tasks.tasks.ids import mint_task_id
from mcp_tasks.tasks.owner import Owner
from mcp_tasks.tasks.record import Lease, TaskRecord
from mcp_tasks.tasks.tools import WarmSpec
from tests.clock import FakeClock
from tests.unit.manifests import tool_spec

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
SETTINGS = OperatorSettings(start_deadline_s=300)
TOOL = tool_spec({"image": "example.org/t:1", "command": ["run"]}, maxRunTimeSeconds=600, maxInputWaitSeconds=60)
IDEMPOTENT = tool_spec({"image": "example.org/t:1", "command": ["run"]}, idempotent=True)
NO_IMAGE = tool_spec({"command": ["run"]})
WARM = dataclasses.replace(
    TOOL, manifest=TOOL.manifest.model_copy(update={"warm": WarmSpec.model_validate({"minWorkers": 1})})
)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def stamp(seconds: float) -> str:
    return at(seconds).strftime("%Y-%m-%dT%H:%M:%SZ")


def task(**changes: Any) -> TaskRecord:
    record = transitions.new_task(mint_task_id(), Owner("t", "alice", "static"), TOOL, {}, T0)
    return dataclasses.replace(record, **changes)


def job(created_s: float = 0, condition: str | None = None, reason: str = "", deleting: bool = False) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "mcptask-x", "uid": "j1", "creationTimestamp": stamp(created_s)}
    if deleting:
        metadata["deletionTimestamp"] = stamp(created_s + 1)
    conditions = [] if condition is None else [{"type": condition, "status": "True", "reason": reason, "message": "m"}]
    return {"metadata": metadata, "status": {"conditions": conditions}}


def pod(
    phase: str = "Running", waiting: str | None = None, exit_code: int | None = None, created_s: float = 0
) -> dict[str, Any]:
    state: dict[str, Any] = {"running": {"startedAt": stamp(created_s)}} if phase == "Running" else {}
    if waiting:
        state = {"waiting": {"reason": waiting, "message": "back-off"}}
    if exit_code is not None:
        message = "Traceback ... ValueError: boom"
        state = {"terminated": {"exitCode": exit_code, "message": message, "startedAt": stamp(created_s)}}
    return {
        "metadata": {"name": f"p{created_s}", "creationTimestamp": stamp(created_s)},
        "status": {"phase": phase, "containerStatuses": [{"state": state}]},
    }


def kinds(plan: d.Plan) -> list[str]:
    return [type(action).__name__ for action in plan.actions]


def reason(plan: d.Plan) -> str | None:
    return next((a.reason for a in plan.actions if isinstance(a, d.Fail)), None)


RUNNING = task(attempt=1)
CASES: list[
    tuple[str, TaskRecord, dict[str, Any] | None, list[dict[str, Any]], Any, float, list[str], str | None, bool]
] = [
    # name, record, job, pods, tool, now (s), actions, Fail reason, confirm (decide again on fresh reads)
    ("new task: create its Job", task(), None, [], TOOL, 1, ["CreateJob"], None, False),
    ("new task of a warm tool: the warm runner's, no Job", task(), None, [], WARM, 1, [], None, False),
    (
        "warm task whose runner's lease expired: still the warm runner's (it applies the restart rules)",
        task(attempt=1, lease=Lease("op", at(5))),
        None,
        [],
        WARM,
        10,
        [],
        None,
        False,
    ),
    (
        "a live lease of a tool no longer warm: left to its holder",
        task(attempt=1, lease=Lease("op", at(30))),
        None,
        [],
        TOOL,
        10,
        [],
        None,
        False,
    ),
    (
        "an expired lease of a tool no longer warm: a lost run",
        task(attempt=1, lease=Lease("op", at(5))),
        None,
        [],
        TOOL,
        10,
        ["Fail"],
        "OutcomeUnknown",
        True,
    ),
    ("new task of a removed tool", task(), None, [], None, 1, ["Fail"], "ToolRemoved", False),
    ("new task of a tool without image", task(), None, [], NO_IMAGE, 1, ["Fail"], "InvalidTool", False),
    ("running quietly", RUNNING, job(), [pod()], TOOL, 10, [], None, False),
    ("Job gone, tool not idempotent", RUNNING, None, [], TOOL, 10, ["Fail"], "OutcomeUnknown", True),
    ("Job gone, idempotent tool", RUNNING, None, [], IDEMPOTENT, 10, ["Rerun", "CreateJob"], None, True),
    (
        "Job gone a third time, idempotent tool: one cap for every re-run",
        task(attempt=3),
        None,
        [],
        IDEMPOTENT,
        10,
        ["Fail"],
        "WorkerLost",
        True,
    ),
    ("Job being deleted by someone", RUNNING, job(deleting=True), [pod()], TOOL, 10, [], None, False),
    ("past maxRunTimeSeconds", RUNNING, job(), [pod()], TOOL, 601, ["Fail", "DeleteJob"], "DeadlineExceeded", True),
    ("time before the container ran is not run time", RUNNING, job(), [pod(created_s=100)], TOOL, 650, [], None, False),
    (
        "no container started within the start deadline",
        RUNNING,
        job(),
        [pod("Pending")],
        TOOL,
        301,
        ["Fail", "DeleteJob"],
        "StartTimeout",
        True,
    ),
    ("pending within the start deadline", RUNNING, job(), [pod("Pending")], TOOL, 299, [], None, False),
    (
        "input wait does not count against the run time",
        task(attempt=1, status=TaskStatus.INPUT_REQUIRED, input_required_since=at(1), input_wait_ms=0),
        job(),
        [pod()],
        tool_spec({"image": "i", "command": ["c"]}, maxRunTimeSeconds=600, maxInputWaitSeconds=3600),
        900,
        [],
        None,
        False,
    ),
    (
        "past maxInputWaitSeconds",
        task(attempt=1, status=TaskStatus.INPUT_REQUIRED, input_required_since=at(5)),
        job(),
        [pod()],
        TOOL,
        66,
        ["Fail", "DeleteJob"],
        "InputTimeout",
        False,
    ),
    (
        "Job complete, no result",
        RUNNING,
        job(condition="Complete"),
        [pod("Succeeded", exit_code=0)],
        TOOL,
        20,
        ["Complete"],
        None,
        False,
    ),
    (
        "retries exhausted, no result",
        RUNNING,
        job(condition="Failed", reason="BackoffLimitExceeded"),
        [pod("Failed", exit_code=1)],
        TOOL,
        20,
        ["Complete"],
        None,
        False,
    ),
    (
        "Job deadline",
        RUNNING,
        job(condition="Failed", reason="DeadlineExceeded"),
        [],
        TOOL,
        20,
        ["Fail"],
        "DeadlineExceeded",
        False,
    ),
    (
        "Job failed otherwise",
        RUNNING,
        job(condition="Failed", reason="PodFailurePolicy"),
        [],
        TOOL,
        20,
        ["Fail"],
        "JobFailed",
        False,
    ),
    (
        "pod cannot pull, within the deadline",
        RUNNING,
        job(),
        [pod("Pending", "ImagePullBackOff")],
        TOOL,
        100,
        [],
        None,
        False,
    ),
    (
        "pod cannot pull, past the deadline",
        RUNNING,
        job(),
        [pod("Pending", "ImagePullBackOff")],
        TOOL,
        300,
        ["Fail", "DeleteJob"],
        "StartTimeout",
        True,
    ),
    (
        "cancel requested, pod running",
        task(attempt=1, cancel_requested_at=at(5), cancel_requested_by="alice"),
        job(),
        [pod()],
        TOOL,
        10,
        ["DeleteJob"],
        None,
        True,
    ),
    (
        "cancel requested, Job already deleted, pod still stopping",
        task(attempt=1, cancel_requested_at=at(5), cancel_requested_by="alice"),
        job(deleting=True),
        [pod()],
        TOOL,
        10,
        [],
        None,
        True,
    ),
    (
        "cancel requested, no pod runs",
        task(attempt=1, cancel_requested_at=at(5), cancel_requested_by="alice"),
        None,
        [pod("Failed", exit_code=143)],
        TOOL,
        10,
        ["Cancel"],
        None,
        True,
    ),
    (
        "abandoned hidden task",
        task(attempt=1, watched_until=at(5)),
        job(),
        [],
        TOOL,
        10,
        ["DeleteJob", "Cancel"],
        None,
        True,
    ),
    (
        "TTL keep-alive",
        task(attempt=1, ttl_ms=20_000, retention_ms=None),
        job(),
        [pod()],
        TOOL,
        15,
        ["RenewTtl"],
        None,
        False,
    ),
    (
        "completed: nothing",
        transitions.complete(RUNNING, {"content": []}, at(3)),
        job(),
        [pod()],
        TOOL,
        100,
        [],
        None,
        False,
    ),
    (
        "failed, Job still running past the grace",
        transitions.failing("x", "R")(RUNNING, at(3)),
        job(),
        [pod()],
        TOOL,
        40,
        ["DeleteJob"],
        None,
        False,
    ),
    (
        "failed, Job still running within the grace",
        transitions.failing("x", "R")(RUNNING, at(3)),
        job(),
        [pod()],
        TOOL,
        10,
        [],
        None,
        False,
    ),
    (
        "failed, Job finished",
        transitions.failing("x", "R")(RUNNING, at(3)),
        job(condition="Complete"),
        [],
        TOOL,
        40,
        [],
        None,
        False,
    ),
]


@pytest.mark.parametrize(
    ("record", "job_", "pods", "tool", "now_s", "actions", "fail_reason", "confirm"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_decide(
    record: TaskRecord,
    job_: dict[str, Any] | None,
    pods: list[dict[str, Any]],
    tool: Any,
    now_s: float,
    actions: list[str],
    fail_reason: str | None,
    confirm: bool,
) -> None:
    plan = d.decide(record, job_, pods, tool, at(now_s), SETTINGS)
    assert kinds(plan) == actions
    assert reason(plan) == fail_reason
    assert plan.confirm is confirm


def test_deadlines_become_the_next_look() -> None:
    start = d.decide(RUNNING, job(), [pod("Pending", "ImagePullBackOff", created_s=0)], TOOL, at(100), SETTINGS)
    assert start.requeue_after_s == pytest.approx(200), "the start deadline is the nearest"
    run = d.decide(RUNNING, job(), [pod()], TOOL, at(100), SETTINGS)
    assert run.requeue_after_s == pytest.approx(500), "then the run-time limit"
    waiting = task(attempt=1, status=TaskStatus.INPUT_REQUIRED, input_required_since=at(90))
    assert d.decide(waiting, job(), [pod()], TOOL, at(100), SETTINGS).requeue_after_s == pytest.approx(50, abs=0.01)
    renew = task(attempt=1, ttl_ms=1_000_000, retention_ms=None)
    plan = d.decide(
        renew, job(), [pod()], tool_spec({"image": "i", "command": ["c"]}, ttlMs=1_000_000), at(1), SETTINGS
    )
    assert plan.requeue_after_s == pytest.approx(499), "the TTL keep-alive at half the retention"
    assert (
        d.decide(transitions.complete(RUNNING, {"content": []}, at(3)), None, [], TOOL, at(4), SETTINGS).requeue_after_s
        is None
    )


def test_a_job_that_ended_without_a_result_reports_the_last_exit() -> None:
    pods = [pod("Failed", exit_code=3, created_s=2), pod("Failed", exit_code=1, created_s=1)]
    plan = d.decide(RUNNING, job(condition="Failed", reason="BackoffLimitExceeded"), pods, TOOL, at(5), SETTINGS)
    (complete,) = plan.actions
    assert isinstance(complete, d.Complete) and complete.result["isError"] is True
    assert "3" in str(complete.result["content"]) and "ValueError: boom" in str(complete.result["content"])


def test_cancel_says_who_asked() -> None:
    by_client = task(attempt=1, cancel_requested_at=at(1), cancel_requested_by="alice")
    by_admin = task(attempt=1, cancel_requested_at=at(1))
    assert d.decide(by_client, None, [], TOOL, at(2), SETTINGS).actions == (d.Cancel(d.CLIENT_CANCEL),)
    assert d.decide(by_admin, None, [], TOOL, at(2), SETTINGS).actions == (d.Cancel(d.ADMIN_CANCEL),)


async def test_the_queue_processes_each_key_once_at_a_time_and_misses_no_change() -> None:
    queue = WorkQueue()
    for key in ("a", "b", "a", "a"):
        queue.add(key)
    assert len(queue) == 2, "duplicates collapse"
    assert await queue.get() == "a"
    queue.add("a")  # changed while being processed
    assert await queue.get() == "b", "a is not handed out twice at once"
    assert len(queue) == 0
    queue.done("a")
    assert await queue.get() == "a", "the change during processing is not missed"
    queue.done("a")
    queue.done("b")


async def test_delayed_adds_keep_the_earliest_time_and_retries_back_off() -> None:
    """Our choice (client-go's shape): the earliest pending time of a key wins; retries double up to a cap."""
    clock = FakeClock()
    queue = WorkQueue(base_delay_s=0.01, max_delay_s=0.04, monotonic=clock.monotonic)
    queue.add_after("late", 5)
    queue.add_after("late", 2)
    queue.add_after("late", 10)
    assert queue.delayed == 1
    clock.advance(1.9)
    queue.add("now")
    assert await queue.get() == "now", "nothing else is due yet"
    assert len(queue) == 0 and queue.delayed == 1
    clock.advance(0.1)
    assert await asyncio.wait_for(queue.get(), 5) == "late", "due at the earliest time asked"
    assert queue.delayed == 0, "the later times were dropped"
    queue.done("late")
    assert [queue.retry("k") for _ in range(4)] == [0.01, 0.02, 0.04, 0.04]
    queue.forget("k")
    assert queue.retry("k") == 0.01
    clock.advance(0.04)
    assert await asyncio.wait_for(queue.get(), 5) == "k", "its back-offs collapsed into one pending add"
    queue.shut_down()
    with pytest.raises(ShutDown):
        await queue.get()


async def test_a_waiting_get_wakes_at_the_due_time_of_a_delayed_add() -> None:
    """Our choice: a worker idle in `get` takes a delayed key when it falls due, without another add."""
    clock = FakeClock()
    queue = WorkQueue(monotonic=clock.monotonic)
    queue.add_after("k", 0.05)
    getting = asyncio.create_task(queue.get(), name="getting")
    await asyncio.wait({getting}, timeout=0)  # it computed its wait on the clock
    clock.advance(0.05)  # due now; the pending get wakes at the interval it computed (real time, 0.05 s)
    assert await asyncio.wait_for(getting, 5) == "k"


def test_children_keep_only_what_decisions_read_and_never_roll_back() -> None:
    children = Children()
    labels = {"mcptasks.io/task-id": "t1", "other": "x"}
    full: dict[str, Any] = {
        "metadata": {
            "name": "mcptask-t1",
            "uid": "u1",
            "resourceVersion": "5",
            "labels": labels,
            "managedFields": [{}],
        },
        "spec": {"template": {"spec": {"containers": [{"env": [{"name": "SECRET", "value": "v"}]}]}}},
        "status": {"conditions": [{"type": "Complete", "status": "True"}], "startTime": "x"},
    }
    assert children.job_event("ADDED", full) == "t1"
    kept = children.job("t1")
    assert kept is not None and "spec" not in kept and "managedFields" not in kept["metadata"]
    assert kept["status"] == {"conditions": [{"type": "Complete", "status": "True"}], "startTime": "x"}
    older = {**full, "metadata": {**full["metadata"], "resourceVersion": "4"}, "status": {}}
    children.job_event("MODIFIED", older)
    assert children.job("t1") == kept, "a late event does not roll back"
    recreated = {**full, "metadata": {**full["metadata"], "uid": "u2", "resourceVersion": "9"}}
    children.job_event("ADDED", recreated)
    children.job_event("DELETED", full)  # the old Job's late DELETED
    assert children.job("t1") is not None, "the old Job's deletion does not remove its successor"
    pod_ = {"metadata": {"name": "p", "resourceVersion": "6", "labels": labels}, "status": {"phase": "Running"}}
    children.pod_event("ADDED", pod_)
    assert [p["status"]["phase"] for p in children.pods("t1")] == ["Running"]
    children.pod_event("DELETED", pod_)
    assert children.pods("t1") == [] and children.task_ids() == {"t1"}
    children.replace_all([], "10", [], "10")
    assert children.task_ids() == set(), "what a newer listing lacks is gone"


def test_a_lease_record_reads_and_writes_the_lease_spec_and_tells_how_long_it_is_held() -> None:
    """coordination.k8s.io/v1 `LeaseSpec` field names, MicroTime with microseconds in UTC (our own choice
    of format, the one client-go writes); a Lease without a holder is held by nobody."""
    renewed = micro_time(T0 + timedelta(microseconds=5))
    assert renewed == "2026-12-01T12:00:00.000005Z"
    lease = {"spec": {"holderIdentity": "a", "leaseDurationSeconds": 15, "renewTime": renewed, "leaseTransitions": 2}}
    record = LeaseRecord.of(lease)
    assert record == LeaseRecord("a", 15, None, renewed, 2)
    assert record.spec() == lease["spec"]
    assert held_until(lease) == T0 + timedelta(seconds=15, microseconds=5)
    released = LeaseRecord("", 1, renewed, renewed, 2)
    assert "holderIdentity" not in released.spec() and held_until({"spec": released.spec()}) is None
    assert LeaseRecord.of({}) == LeaseRecord("", 0, None, None, 0)


def test_a_hidden_task_is_kept_alive_by_its_own_retention_and_a_renewal_settles() -> None:
    """A hidden task keeps 60 s, not its tool's hour: no renewal while more than half is left, and a
    renewal moves the next one into the future (no write loop)."""
    hidden = task(attempt=1, ttl_ms=60_000, retention_ms=60_000)
    assert kinds(d.decide(hidden, job(), [pod()], TOOL, at(10), SETTINGS)) == []
    plan = d.decide(hidden, job(), [pod()], TOOL, at(31), SETTINGS)
    assert plan.actions == (d.RenewTtl(60_000),)
    renewed = transitions.renew_ttl(hidden, at(31), 60_000)
    assert kinds(d.decide(renewed, job(), [pod()], TOOL, at(31), SETTINGS)) == []


def test_a_job_the_task_never_counted_is_counted() -> None:
    """An operator that died between creating the Job and counting the run: the next reconcile counts it,
    so that losing this Job later is known to have lost a run (OutcomeUnknown, not a silent re-run)."""
    plan = d.decide(task(attempt=0), job(), [pod()], TOOL, at(5), SETTINGS)
    assert kinds(plan) == ["CountAttempt"] and not plan.confirm


def test_a_tiny_ttl_is_renewed_at_most_every_half_minute() -> None:
    """`ttlMs: 20` must not mean a write per reconcile: at most one renewal per `MIN_RENEWAL_INTERVAL_S`."""
    tiny = tool_spec({"image": "i", "command": ["c"]}, ttlMs=20)
    record = task(attempt=1, ttl_ms=20, retention_ms=20)
    assert d.decide(record, job(), [pod()], tiny, at(1), SETTINGS).actions == (d.RenewTtl(20),), "the first at once"
    renewed = transitions.renew_ttl(record, at(1), 20)
    later = d.decide(renewed, job(), [pod()], tiny, at(2), SETTINGS)
    assert kinds(later) == [] and later.requeue_after_s == pytest.approx(29, abs=0.01), "the next 30 s later"
    now, writes = at(0), 0
    for _ in range(1000):  # a reconcile every 50 ms for 50 s, each renewal applied as the reconciler does
        now += timedelta(milliseconds=50)
        plan = d.decide(record, job(), [pod()], tiny, now, SETTINGS)
        if plan.actions:
            assert plan.actions == (d.RenewTtl(20),)
            record, writes = transitions.renew_ttl(record, now, 20), writes + 1
    assert writes == 2


def test_a_warm_task_held_by_a_lease_is_looked_at_again_when_the_lease_ends() -> None:
    plan = d.decide(task(attempt=1, lease=Lease("op", at(30))), None, [], TOOL, at(10), SETTINGS)
    assert plan.actions == () and plan.requeue_after_s == pytest.approx(20)
    assert d.decide(task(), job(), [pod()], WARM, at(1), SETTINGS).actions, "a Job it already has is still followed"
