"""Which Kubernetes Events a task write reports (`operator.events.events_for`), as a table over transitions."""

from __future__ import annotations

from datetime import timedelta

import pytest

from mcp_tasks.operator.events import TaskEvent, events_for
from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.tasks import transitions
from mcp_tasks.tasks.ids import mint_task_id
from mcp_tasks.tasks.interfaces import utc_now
from mcp_tasks.tasks.owner import Owner
from mcp_tasks.tasks.record import TaskRecord
from tests.unit.manifests import tool_spec

NOW = utc_now()
LATER = NOW + timedelta(seconds=5)
ELICIT: JsonObject = {"method": "elicitation/create", "params": {"message": "ok?", "requestedSchema": {}}}
NEW = transitions.new_task(mint_task_id(), Owner("acme", "alice", "static"), tool_spec(), {}, NOW)
RUNNING = transitions.start_attempt(NEW)
ASKING = transitions.add_input_requests(RUNNING, [("confirm", ELICIT), ("why", ELICIT)], LATER)[0]
OK: JsonObject = {"content": [{"type": "text", "text": "done"}], "isError": False}
BAD: JsonObject = {"content": [{"type": "text", "text": "no such file"}], "isError": True}


def summary(events: list[TaskEvent]) -> list[tuple[str, str, str, bool]]:
    return [(event.reason, event.type, event.note, event.related_job) for event in events]


CASES: list[tuple[str, TaskRecord | None, TaskRecord, list[tuple[str, str, str, bool]]]] = [
    ("created", None, NEW, []),
    ("a run started (JobCreated is the reconciler's)", NEW, RUNNING, []),
    ("progress only", RUNNING, transitions.set_status_message(RUNNING, "half way", LATER), []),
    ("asks", RUNNING, ASKING, [("InputRequested", "Normal", "Waiting for input: confirm, why", True)]),
    (
        "answered",
        ASKING,
        transitions.answer_input_requests(
            ASKING, {"confirm": {"action": "accept"}, "why": {"action": "accept"}}, LATER
        ),
        [],
    ),
    ("completed", RUNNING, transitions.complete(RUNNING, OK, LATER), [("Completed", "Normal", "Completed", True)]),
    (
        "completed with a tool error",
        RUNNING,
        transitions.complete(RUNNING, BAD, LATER),
        [("ToolError", "Warning", "Completed with a tool error: no such file", True)],
    ),
    (
        "cancelled",
        RUNNING,
        transitions.cancel(RUNNING, LATER),
        [("Cancelled", "Normal", "Cancelled at the client's request", True)],
    ),
    (
        "never started",
        NEW,
        transitions.failing("The tool's pod could not start within 300s (ImagePullBackOff)", "StartTimeout")(
            NEW, LATER
        ),
        [("StartTimeout", "Warning", "The tool's pod could not start within 300s (ImagePullBackOff)", False)],
    ),
    (
        "lost its Job",
        RUNNING,
        transitions.failing("outcome unknown", "OutcomeUnknown")(RUNNING, LATER),
        [("OutcomeUnknown", "Warning", "outcome unknown", True)],
    ),
]


@pytest.mark.parametrize(("before", "after", "expected"), [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_events_for_each_kind_of_write(
    before: TaskRecord | None, after: TaskRecord, expected: list[tuple[str, str, str, bool]]
) -> None:
    assert summary(events_for(before, after)) == expected
