"""McpTask mapping: each task transition is exactly one write (spec *or* status), and the CRDs match the models."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

from mcp_tasks.cli.main import main
from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.protocol.models import TaskStatus
from mcp_tasks.store.kubernetes import mapping
from mcp_tasks.store.kubernetes.mapping import ImmutableFieldChanged
from mcp_tasks.store.kubernetes.resources import TENANT_LABEL, label_value
from mcp_tasks.tasks import transitions
from mcp_tasks.tasks.errors import WrongWriter
from mcp_tasks.tasks.ids import mint_task_id
from mcp_tasks.tasks.interfaces import Writer, utc_now
from mcp_tasks.tasks.owner import Owner
from mcp_tasks.tasks.record import TaskRecord
from tests.unit.manifests import tool_spec

REPO = Path(__file__).resolve().parents[2]
CRD_TEMPLATES = REPO / "charts" / "mcp-tasks-crds" / "templates"
NOW = utc_now()
ELICIT: JsonObject = {"method": "elicitation/create", "params": {"message": "ok?", "requestedSchema": {}}}
ANSWER: JsonObject = {"action": "accept", "content": {"ok": True}}
LEASE = timedelta(seconds=30)


def _fresh() -> JsonObject:
    record = transitions.new_task(
        mint_task_id(), Owner("acme", "alice", "static"), tool_spec(), {"n": 1}, NOW, pre_input_responses={"p": ANSWER}
    )
    obj = mapping.new_object(record, "ns")
    obj["metadata"]["resourceVersion"] = "1"
    return obj


def _apply(obj: JsonObject, plan: mapping.WritePlan) -> JsonObject:
    """What the API server stores after the plan's writes (each bumps resourceVersion)."""
    updated = {**obj, "metadata": dict(obj["metadata"])}
    if plan.spec is not None:
        updated["spec"] = mapping.dump(plan.spec)
    if plan.status is not None:
        updated["status"] = mapping.dump(plan.status)
    updated["metadata"]["resourceVersion"] = str(int(obj["metadata"]["resourceVersion"]) + 1)
    return updated


Step = Callable[[TaskRecord], TaskRecord]


def _step(obj: JsonObject, change: Step, side: str) -> tuple[JsonObject, TaskRecord]:
    before = mapping.to_record(obj)
    after = change(before)
    writer = Writer.CLIENT if side == "spec" else Writer.EXECUTOR
    plan = mapping.plan_write(mapping.parse(obj), after, writer)
    other = Writer.EXECUTOR if writer is Writer.CLIENT else Writer.CLIENT
    with pytest.raises(WrongWriter):  # the caller names the writer; the other one is refused
        mapping.plan_write(mapping.parse(obj), after, other)
    written = [name for name in ("spec", "status") if getattr(plan, name) is not None]
    assert written == [side], f"expected one {side} write, planned {written}"
    stored = _apply(obj, plan)
    view = mapping.to_record(stored)
    assert mapping._comparable(view) == mapping._comparable(after)
    return stored, view


def test_every_transition_of_a_task_life_is_one_write_to_the_right_subresource() -> None:
    obj = _fresh()
    later = NOW + timedelta(seconds=1)
    obj, _ = _step(obj, lambda r: transitions.claim(r, "w1", later, LEASE, 60_000), "status")
    obj, view = _step(obj, transitions.start_attempt, "status")
    assert view.attempt == 2
    obj, _ = _step(obj, lambda r: transitions.set_status_message(r, "halfway", later), "status")
    obj, view = _step(
        obj, lambda r: transitions.add_input_requests(r, [("q", ELICIT), ("r", ELICIT)], later)[0], "status"
    )
    assert view.status is TaskStatus.INPUT_REQUIRED and set(view.input_requests) == {"q", "r"}
    obj, view = _step(obj, lambda r: transitions.answer_input_requests(r, {"q": ANSWER}, later), "spec")
    assert view.status is TaskStatus.INPUT_REQUIRED and set(view.input_requests) == {"r"}
    obj, view = _step(obj, lambda r: transitions.answer_input_requests(r, {"r": ANSWER}, later), "spec")
    assert view.status is TaskStatus.WORKING and view.input_requests == {} and set(view.input_responses) == {"q", "r"}
    obj, view = _step(obj, lambda r: transitions.take_input_responses(r, ["q", "r"])[0], "status")
    assert view.input_responses == {} and view.issued_input_keys == ("q", "r")
    obj, view = _step(obj, lambda r: transitions.add_input_requests(r, [("q", ELICIT)], later)[0], "status")
    assert list(view.input_requests) == ["q-2"], "a key is never reused within the task's life"
    obj, view = _step(obj, lambda r: transitions.request_cancel(r, "alice", later + timedelta(seconds=1)), "spec")
    assert view.cancel_requested_at is not None and view.last_updated_at > later
    obj, _ = _step(obj, lambda r: transitions.renew(r, "w1", later + timedelta(seconds=5), LEASE, 60_000), "status")
    obj, view = _step(obj, lambda r: transitions.cancel(r, later + timedelta(seconds=2)), "status")
    assert view.status is TaskStatus.CANCELLED and view.lease is None and view.input_requests == {}


def test_an_input_round_that_declares_other_capabilities_is_one_spec_write() -> None:
    """A synchronous run's next round (SEP-2322) speaks for its own capabilities: client intent, in spec."""
    obj = _fresh()
    obj, _ = _step(obj, lambda r: transitions.add_input_requests(r, [("q", ELICIT)], NOW)[0], "status")
    later = NOW + timedelta(seconds=1)

    def next_round(record: TaskRecord) -> TaskRecord:
        return transitions.answer_input_requests(
            transitions.next_round(record, {"elicitation": {}, "sampling": {}}, later), {"q": ANSWER}, later
        )

    obj, view = _step(obj, next_round, "spec")
    assert view.client_capabilities == {"elicitation": {}, "sampling": {}}
    assert view.status is TaskStatus.WORKING


def test_answers_given_before_the_executor_consumes_them_survive_a_rerun_and_completion() -> None:
    obj = _fresh()
    obj, _ = _step(obj, lambda r: transitions.add_input_requests(r, [("q", ELICIT)], NOW)[0], "status")
    obj, _ = _step(obj, lambda r: transitions.answer_input_requests(r, {"q": ANSWER}, NOW), "spec")
    obj, view = _step(obj, lambda r: transitions.reset_for_rerun(r, NOW), "status")
    assert view.input_responses == {} and view.input_requests == {} and view.issued_input_keys == ("q",)
    result: JsonObject = {"content": [{"type": "text", "text": "ok"}], "isError": False}
    obj, view = _step(obj, lambda r: transitions.complete(r, result, NOW), "status")
    assert view.status is TaskStatus.COMPLETED and view.result is not None
    assert obj["spec"]["inputResponses"] == {"q": ANSWER}, "client intent is never rewritten"


def test_an_answer_the_executor_took_is_handed_out_again_from_the_spec() -> None:
    """Consuming an answer drops its request from `status.inputRequests`; the answer stays in the spec, so a
    worker that asks again (the answer to its first ask was lost) gets it, from any replica's view."""
    obj = _fresh()
    obj, _ = _step(obj, lambda r: transitions.add_input_requests(r, [("q", ELICIT)], NOW)[0], "status")
    obj, _ = _step(obj, lambda r: transitions.answer_input_requests(r, {"q": ANSWER}, NOW), "spec")
    obj, view = _step(obj, lambda r: transitions.take_input_responses(r, ["q"])[0], "status")
    assert "inputRequests" not in obj["status"] and view.input_responses == {}
    assert transitions.take_input_responses(view, ["q"]) == (view, {"q": ANSWER})


def test_fields_fixed_at_creation_cannot_change() -> None:
    obj = _fresh()
    record = mapping.to_record(obj)
    with pytest.raises(ImmutableFieldChanged):
        mapping.plan_write(mapping.parse(obj), dataclasses.replace(record, arguments={"n": 2}), Writer.CLIENT)
    with pytest.raises(ImmutableFieldChanged):
        mapping.plan_write(
            mapping.parse(obj), dataclasses.replace(record, owner=Owner("evil", "alice", "static")), Writer.EXECUTOR
        )


def test_tenants_that_are_not_label_values_are_hashed() -> None:
    assert label_value("acme") == "acme"
    assert label_value("evil corp/unit 7").startswith("sha256-")
    assert len(label_value("x" * 64)) <= 63
    assert _fresh()["metadata"]["labels"][TENANT_LABEL] == "acme"


def test_the_committed_crds_are_generated_from_the_models(tmp_path: Path) -> None:
    assert main(["crds", "--check", str(CRD_TEMPLATES)]) == 0, f"run `mcptasks crds --write {CRD_TEMPLATES}`"
    assert main(["crds", "--write", str(tmp_path)]) == 0
    drifted = tmp_path / "mcptasks.yaml"
    drifted.write_text(drifted.read_text().replace("issuedInputKeys", "issuedKeys"))
    assert main(["crds", "--check", str(tmp_path)]) == 1


def test_a_callers_watch_is_one_spec_write_even_at_microsecond_precision() -> None:
    """`watchedUntil` is stored at ms precision; a client's renewal must not look like a status change."""
    obj = _fresh()
    record = mapping.to_record(obj)
    hidden = dataclasses.replace(record, watched_until=NOW)
    obj = _apply(obj, mapping.WritePlan(spec=mapping.spec_for_new(hidden), status=None))
    until = NOW + timedelta(seconds=30, microseconds=123_456)
    obj, view = _step(obj, lambda r: transitions.await_next_round(r, until), "spec")
    assert view.watched_until is not None and abs((view.watched_until - until).total_seconds()) < 0.001
