"""McpTask `status.conditions` (Kubernetes API conventions), derived from the record in the one status write."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.protocol.models import TaskStatus
from mcp_tasks.store.kubernetes import conditions, mapping
from mcp_tasks.tasks import transitions
from mcp_tasks.tasks.ids import mint_task_id
from mcp_tasks.tasks.interfaces import Writer, utc_now
from mcp_tasks.tasks.owner import Owner
from mcp_tasks.tasks.record import TaskRecord, iso_ms
from tests.unit.manifests import tool_spec

NOW = utc_now()
LATER = NOW + timedelta(seconds=5)
ELICIT: JsonObject = {"method": "elicitation/create", "params": {"message": "ok?", "requestedSchema": {}}}


def _new() -> TaskRecord:
    return transitions.new_task(mint_task_id(), Owner("acme", "alice", "static"), tool_spec(), {}, NOW)


def _running() -> TaskRecord:
    return transitions.claim(_new(), "runner", NOW, timedelta(seconds=30), 60_000)


def _summary(record: TaskRecord) -> tuple[str, ...]:
    """`Started`, `InputRequired`, `Finished` (a finished task's `Finished` alone) as `type=status/reason`."""
    return tuple(f"{kind}={status}/{reason}" for kind, status, reason in conditions.desired(record))


def _live(started: str, waiting: str) -> tuple[str, ...]:
    return (f"Started={started}", f"InputRequired={waiting}", "Finished=False/Running")


CASES: list[tuple[str, TaskRecord, tuple[str, ...]]] = [
    ("created", _new(), _live("False/NotStarted", "False/NoPendingInput")),
    ("running", _running(), _live("True/RunStarted", "False/NoPendingInput")),
    (
        "waiting for a slot",
        transitions.set_status_message(_new(), "queued: next in line for a slot", LATER),
        _live("False/Queued", "False/NoPendingInput"),
    ),
    (
        "its Job waiting for Kueue",
        transitions.set_status_message(_running(), "queued: waiting for Kueue to admit its Job (LocalQueue q)", LATER),
        _live("False/Queued", "False/NoPendingInput"),
    ),
    (
        "waiting for input",
        transitions.add_input_requests(_running(), [("q", ELICIT)], LATER)[0],
        _live("True/RunStarted", "True/InputRequested"),
    ),
    (
        "completed",
        transitions.complete(_running(), {"content": []}, LATER),
        ("Finished=True/Completed",),
    ),
    (
        "completed with a tool error",
        transitions.complete(_running(), {"content": [], "isError": True}, LATER),
        ("Finished=True/ToolError",),
    ),
    (
        "failed before it started",
        transitions.failing("the pod could not start", "StartTimeout")(_running(), LATER),
        ("Finished=True/StartTimeout",),
    ),
    (
        "failed by the tool's own error",
        transitions.fail(_running(), {"code": -32603, "message": "boom"}, "boom", LATER),
        ("Finished=True/Failed",),
    ),
    (
        "cancelled before any run",
        transitions.cancel(_new(), LATER),
        ("Finished=True/Cancelled",),
    ),
]


@pytest.mark.parametrize(("case", "record", "expected"), CASES, ids=[case for case, _, _ in CASES])
def test_each_state_has_its_conditions(case: str, record: TaskRecord, expected: tuple[str, ...]) -> None:
    assert _summary(record) == expected


def test_a_failure_reason_that_is_not_camel_case_is_just_failed() -> None:
    record = transitions.fail(_running(), {"code": 1, "message": "x", "data": {"reason": "no spaces!"}}, "x", LATER)
    assert _summary(record) == ("Finished=True/Failed",)


def test_last_transition_time_moves_only_when_the_status_changes_and_generation_is_observed() -> None:
    running = _running()
    first = conditions.task_conditions(running, [], generation=1)
    progressed = dataclasses.replace(running, status_message="half way", last_updated_at=LATER)
    second = conditions.task_conditions(progressed, first, generation=3)
    assert [c.last_transition_time for c in second] == [c.last_transition_time for c in first]
    assert {c.observed_generation for c in second} == {3}
    done = transitions.complete(progressed, {"content": []}, LATER + timedelta(seconds=1))
    (finished,) = conditions.task_conditions(done, second, generation=3)
    assert finished.type == "Finished" and finished.status == "True"
    assert finished.last_transition_time == iso_ms(done.last_updated_at) != first[2].last_transition_time
    assert finished.observed_generation == 3, "kubectl wait reads it"
    assert finished.message is None, "a condition repeats nothing status says (statusMessage)"


def test_conditions_ride_in_the_status_write_of_each_transition() -> None:
    """No extra write: the status the store writes for a transition already holds the new conditions."""
    record = _new()
    obj = mapping.new_object(record, "ns")
    obj["metadata"].update(resourceVersion="1", generation=1)
    claimed = transitions.claim(dataclasses.replace(record, version="1"), "runner", NOW, timedelta(seconds=30), 60_000)
    plan = mapping.plan_write(mapping.parse(obj), claimed, Writer.EXECUTOR)
    assert plan.spec is None and plan.status is not None
    by_type = {c.type: c for c in plan.status.conditions}
    assert by_type["Started"].status == "True" and by_type["Finished"].status == "False"
    assert all(c.observed_generation == 1 for c in plan.status.conditions)
    assert TaskStatus.WORKING.value == plan.status.task_status.value
