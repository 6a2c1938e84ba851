"""The one stop rule of every executor (`tasks.deadlines`), as a table: our own rule, docs/design.md §7.1."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mcp_tasks.protocol.models import TaskStatus
from mcp_tasks.store.manifests import load_manifest_file
from mcp_tasks.tasks import deadlines, transitions
from mcp_tasks.tasks.deadlines import RunFacts, Stop
from mcp_tasks.tasks.ids import mint_task_id
from mcp_tasks.tasks.owner import Owner
from mcp_tasks.tasks.record import TaskRecord
from tests.conftest import REPO

T0 = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
_ASKER = next(t for t in load_manifest_file(REPO / "tests" / "tools" / "tools.yaml") if t.name == "patient_asker")
_TABLE_LIMITS = _ASKER.execution.model_copy(update={"max_run_time_seconds": 1.5, "max_input_wait_seconds": 4})
TOOL = dataclasses.replace(_ASKER, manifest=_ASKER.manifest.model_copy(update={"execution": _TABLE_LIMITS}))
LIMITS = TOOL.execution  # maxRunTimeSeconds 1.5, maxInputWaitSeconds 4: the table's numbers


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def task(**changes: Any) -> TaskRecord:
    record = transitions.new_task(mint_task_id(), Owner("t", "s", "static"), TOOL, {}, T0)
    return dataclasses.replace(record, **changes)


WAITING = task(status=TaskStatus.INPUT_REQUIRED, input_required_since=at(1))
RUNNING = RunFacts(started_at=T0)

CASES: list[tuple[str, TaskRecord, RunFacts, float, Stop | datetime | None]] = [
    ("working within its run time: look again when it is used up", task(), RUNNING, 1.0, at(1.5)),
    ("working past its run time", task(), RUNNING, 1.5, Stop.DEADLINE),
    ("cancel wins over every limit", task(cancel_requested_at=at(0.5)), RUNNING, 9.0, Stop.CANCEL),
    ("a caller gone", task(watched_until=at(2)), RUNNING, 1.0 + 2.0, Stop.ABANDONED),
    ("a caller's watch is a deadline too", task(watched_until=at(1.2)), RUNNING, 1.0, at(1.2)),
    ("waiting for input: run time stands still", WAITING, RUNNING, 4.0, at(5) + deadlines.INPUT_WAIT_SLACK),
    ("waiting past maxInputWaitSeconds", WAITING, RUNNING, 5.01, Stop.INPUT_TIMEOUT),
    ("earlier waits are not this run's", task(input_wait_ms=10_000), RunFacts(T0, 10_000), 1.0, at(1.5)),
    ("not started: its start deadline", task(), RunFacts(None, start_deadline=at(3)), 1.0, at(3)),
    ("not started by its start deadline", task(), RunFacts(None, start_deadline=at(3)), 3.0, Stop.START_TIMEOUT),
    ("not started, no deadline: only a write can change it", task(), RunFacts(None), 100.0, None),
]


@pytest.mark.parametrize(("name", "record", "run", "now_s", "expected"), CASES, ids=[case[0] for case in CASES])
def test_next_stop(name: str, record: TaskRecord, run: RunFacts, now_s: float, expected: object) -> None:
    assert deadlines.next_stop(record, at(now_s), LIMITS, run) == expected, name


@pytest.mark.parametrize("stop", list(Stop))
def test_every_stop_has_one_outcome_for_every_executor(stop: Stop) -> None:
    record = task(cancel_requested_by="alice")
    ending = deadlines.verdict(stop, record, LIMITS, "No pod started")
    finished = ending.apply(record, at(2))
    assert finished.status is ending.status and finished.status_message == ending.message
    if ending.status is TaskStatus.FAILED:
        assert finished.error is not None and finished.error["data"]["reason"] == ending.reason
