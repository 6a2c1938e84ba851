"""The task state machine: legal transitions only, key minting, partial answers."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mcp_tasks.protocol.models import TaskStatus
from mcp_tasks.store.manifests import load_manifest_file
from mcp_tasks.tasks import transitions
from mcp_tasks.tasks.errors import IllegalTransition, InputCapabilityMissing, LeaseLost
from mcp_tasks.tasks.ids import mint_task_id
from mcp_tasks.tasks.owner import Owner
from mcp_tasks.tasks.record import TaskRecord
from tests.conftest import REPO

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
ELICIT = {
    "method": "elicitation/create",
    "params": {"message": "?", "requestedSchema": {"type": "object", "properties": {}}},
}


def fresh() -> TaskRecord:
    tool = next(
        t for t in load_manifest_file(REPO / "conformance" / "tools" / "fixtures.yaml") if t.name == "multi_input"
    )
    return transitions.new_task(mint_task_id(), Owner("t", "s", "static"), tool, {}, NOW)


def test_task_ids_have_128_bits_and_are_header_safe() -> None:
    ids = {mint_task_id() for _ in range(1000)}
    assert len(ids) == 1000
    assert all(len(i) == 32 and i.isalnum() and i == i.lower() for i in ids)


def test_keys_are_minted_once_per_task_life() -> None:
    record, keys = transitions.add_input_requests(fresh(), [("name", ELICIT), ("name", ELICIT)], NOW)
    assert keys == ["name", "name-2"]
    record = transitions.answer_input_requests(record, {"name": {"action": "accept"}}, NOW)
    record, later = transitions.add_input_requests(record, [("name", ELICIT)], NOW)
    assert later == ["name-3"]
    assert record.issued_input_keys == ("name", "name-2", "name-3")


def test_a_retried_round_gets_its_keys_again_and_a_new_round_new_keys() -> None:
    """A worker whose answer to POST /input-requests was lost sends the same round again: the same keys,
    nothing written (the client may already have answered them); any other id, or none, is a new round,
    and so is the same id with other requests."""
    round_1 = [("a", ELICIT), ("b", ELICIT)]
    record, keys = transitions.add_input_requests(fresh(), round_1, NOW, "round-1")
    assert keys == ["a", "b"] and record.input_round_digest == transitions.round_digest("round-1", round_1)
    assert len(record.input_round_digest) == 43
    answered = transitions.answer_input_requests(record, {"a": {"action": "accept"}}, NOW)
    again, repeated = transitions.add_input_requests(answered, round_1, NOW, "round-1")
    assert repeated == ["a", "b"] and again is answered, "a retry writes nothing"
    assert transitions.add_input_requests(answered, round_1, NOW, "round-2")[1] == ["a-2", "b-2"]
    assert transitions.add_input_requests(answered, round_1, NOW)[1] == ["a-2", "b-2"]
    other = {"method": "elicitation/create", "params": {"message": "another?", "requestedSchema": {"type": "object"}}}
    assert transitions.add_input_requests(answered, [("a", other), ("b", ELICIT)], NOW, "round-1")[1] == ["a-2", "b-2"]
    rerun = transitions.reset_for_rerun(answered, NOW)
    assert rerun.input_round_digest is None
    assert transitions.add_input_requests(rerun, round_1, NOW, "round-1")[1] == ["a-2", "b-2"]
    finished = transitions.complete(answered, {"content": []}, NOW)
    assert finished.input_round_digest is None
    with pytest.raises(IllegalTransition):
        transitions.add_input_requests(finished, round_1, NOW, "round-1")


def test_a_repeated_round_is_not_refused_for_a_capability_a_later_round_dropped() -> None:
    """A hidden task's next input round may declare fewer capabilities (`next_round`); the keys of the
    round already issued are handed back all the same when the worker sends that round again."""
    record, keys = transitions.add_input_requests(fresh(), [("a", ELICIT)], NOW, "r")
    narrowed = dataclasses.replace(record, client_capabilities={})
    with pytest.raises(InputCapabilityMissing):
        transitions.add_input_requests(narrowed, [("a", ELICIT)], NOW, "another")
    assert transitions.add_input_requests(narrowed, [("a", ELICIT)], NOW, "r")[1] == keys


def test_an_answer_asked_for_again_waits_while_another_asked_for_is_pending() -> None:
    """A worker that asks for every key of its round each time is handed a taken answer again only with a
    fresh one or once nothing it asks for is pending, so it waits instead of spinning."""
    record, (a, b) = transitions.add_input_requests(fresh(), [("a", ELICIT), ("b", ELICIT)], NOW, "r")
    record = transitions.answer_input_requests(record, {a: {"action": "accept"}}, NOW)
    record, taken = transitions.take_input_responses(record, [a, b])
    assert taken == {a: {"action": "accept"}}
    assert transitions.take_input_responses(record, [a, b]) == (record, {}), "b is pending: wait"
    record = transitions.answer_input_requests(record, {b: {"action": "decline"}}, NOW)
    record, taken = transitions.take_input_responses(record, [a, b])
    assert taken == {a: {"action": "accept"}, b: {"action": "decline"}}
    assert transitions.take_input_responses(record, [a, b])[1] == taken, "nothing pending: handed out again"


def test_partial_answers_keep_input_required_until_none_pending() -> None:
    record, (a, b) = transitions.add_input_requests(fresh(), [("a", ELICIT), ("b", ELICIT)], NOW)
    assert record.status is TaskStatus.INPUT_REQUIRED
    record = transitions.answer_input_requests(record, {a: {"action": "accept"}, "zzz": {}}, NOW)
    assert record.status is TaskStatus.INPUT_REQUIRED and list(record.input_requests) == [b]
    record = transitions.answer_input_requests(record, {b: {"action": "decline"}}, NOW + timedelta(seconds=1))
    assert record.status is TaskStatus.WORKING and record.last_updated_at == NOW + timedelta(seconds=1)
    record, taken = transitions.take_input_responses(record, [a, b])
    assert set(taken) == {a, b} and record.input_responses == {}
    again, handed = transitions.take_input_responses(record, [a])
    assert handed == {a: taken[a]} and again is record, "asked again (its answer was lost): the same, no write"
    finished = transitions.complete(record, {"content": []}, NOW)
    assert finished.taken_input_responses == {} and transitions.take_input_responses(finished, [a])[1] == {}


def test_terminal_states_never_change() -> None:
    done = transitions.complete(fresh(), {"content": []}, NOW)
    assert done.result == {"content": [], "resultType": "complete"}
    for change in (
        lambda r: transitions.fail(r, {"code": -32603, "message": "x"}, "x", NOW),
        lambda r: transitions.cancel(r, NOW),
        lambda r: transitions.add_input_requests(r, [("k", ELICIT)], NOW),
        lambda r: transitions.set_status_message(r, "late", NOW),
        lambda r: transitions.complete(r, {"content": [{"type": "text", "text": "second"}]}, NOW),
    ):
        with pytest.raises(IllegalTransition):
            change(done)
    assert transitions.request_cancel(done, "s", NOW) is done
    assert transitions.answer_input_requests(done, {"k": {}}, NOW) is done


def test_only_the_lease_holder_renews_and_running_tasks_keep_their_ttl_ahead() -> None:
    record = transitions.claim(fresh(), "me", NOW, timedelta(seconds=30), retention_ms=60_000)
    later = NOW + timedelta(hours=5)
    renewed = transitions.renew(record, "me", later, timedelta(seconds=30), retention_ms=60_000)
    assert renewed.created_at + timedelta(milliseconds=renewed.ttl_ms) >= later + timedelta(minutes=1)
    with pytest.raises(LeaseLost):
        transitions.renew(record, "someone-else", later, timedelta(seconds=30), retention_ms=60_000)


@pytest.mark.parametrize(
    "finish",
    [
        lambda r, now: transitions.complete(r, {"content": []}, now),
        transitions.failing("lost", "OutcomeUnknown"),
        transitions.cancel,
    ],
    ids=["completed", "failed", "cancelled"],
)
def test_a_task_that_outlived_its_ttl_stays_readable_its_retention_after_it_ends(finish: Any) -> None:
    """Our rule (docs/design.md §11): a finished task is readable until the later of `createdAt + ttlMs`
    and its end plus the `ttlMs` it was created with, whatever the keep-alive did meanwhile."""
    record = dataclasses.replace(fresh(), ttl_ms=1_500, retention_ms=1_500)
    ended_at = NOW + timedelta(seconds=20)
    ended = finish(record, ended_at)
    assert ended.status.is_terminal
    assert ended.expires_at == ended_at + timedelta(milliseconds=1_500)
    assert not ended.is_expired(ended_at + timedelta(milliseconds=1_499))
    assert ended.is_expired(ended_at + timedelta(milliseconds=1_500))
    quick = finish(dataclasses.replace(fresh(), ttl_ms=3_600_000, retention_ms=1_500), NOW + timedelta(seconds=1))
    assert quick.ttl_ms == 3_600_000  # an expiry further out than that is never shortened


@pytest.mark.parametrize(
    ("declared", "asked", "missing"),
    [
        (None, {"method": "elicitation/create", "params": {}}, None),
        ({}, {"method": "elicitation/create", "params": {}}, "elicitation"),
        ({"elicitation": {}}, {"method": "elicitation/create", "params": {"mode": "form"}}, None),
        ({"elicitation": {}}, {"method": "elicitation/create", "params": {"mode": "url"}}, "elicitation.url"),
        ({"elicitation": {"url": {}}}, {"method": "elicitation/create", "params": {}}, "elicitation.form"),
        ({"elicitation": {"form": {}, "url": {}}}, {"method": "elicitation/create", "params": {"mode": "url"}}, None),
        ({"elicitation": {}}, {"method": "sampling/createMessage", "params": {}}, "sampling"),
        ({"sampling": {}}, {"method": "sampling/createMessage", "params": {}}, None),
        ({"sampling": {}}, {"method": "roots/list", "params": {}}, "roots"),
    ],
)
def test_input_requests_need_the_capability_the_creating_client_declared(
    declared: dict[str, Any] | None, asked: dict[str, Any], missing: str | None
) -> None:
    """MCP 2026-07-28 client capabilities: no input request of a kind the client did not declare."""
    record = dataclasses.replace(fresh(), client_capabilities=declared)
    assert transitions.missing_input_capability(record, asked) == missing


def test_only_input_capabilities_are_recorded_with_a_task() -> None:
    caps = {"elicitation": {"form": {}}, "extensions": {"x": {}}, "sampling": True, "roots": {"listChanged": True}}
    assert transitions.input_capabilities(caps) == {"elicitation": {"form": {}}, "roots": {"listChanged": True}}


def test_an_undeclared_kind_of_input_is_never_issued() -> None:
    record = dataclasses.replace(fresh(), client_capabilities={"sampling": {}})
    with pytest.raises(InputCapabilityMissing) as refused:
        transitions.add_input_requests(record, [("name", ELICIT)], NOW)
    assert refused.value.capability == "elicitation" and "clientCapabilities" in str(refused.value)


def test_time_waiting_for_input_is_kept_apart_from_working_time() -> None:
    """`maxRunTimeSeconds` counts working time only; each wait is bounded by `maxInputWaitSeconds`."""

    def at(seconds: float) -> datetime:
        return NOW + timedelta(seconds=seconds)

    record, (key,) = transitions.add_input_requests(fresh(), [("q", ELICIT)], at(10))
    assert record.input_required_since == at(10) and record.input_wait_ms == 0
    assert transitions.run_time_used_s(record, at(0), at(70)) == 10.0, "60 s waiting are not working time"
    assert transitions.input_wait_exceeded(record, 59, at(70)) and not transitions.input_wait_exceeded(
        record, 61, at(70)
    )
    record = transitions.answer_input_requests(record, {key: {"action": "accept"}}, at(70))
    assert record.input_required_since is None and record.input_wait_ms == 60_000
    assert transitions.run_time_used_s(record, at(0), at(75)) == 15.0
    assert not transitions.input_wait_exceeded(record, 1, at(500)), "not waiting any more"
    rerun = transitions.reset_for_rerun(record, at(80))
    assert rerun.input_wait_ms == 0 and rerun.input_required_since is None


def test_a_lost_run_reruns_only_a_rerunnable_task_and_at_most_max_runs_in_all() -> None:
    """Our restart rule (docs/design.md §7), one for every executor and every cause of a lost run."""
    running = transitions.claim(fresh(), "me", NOW, timedelta(seconds=30), retention_ms=60_000)
    assert transitions.after_lost_run(running, NOW, True, "gone").status is TaskStatus.WORKING
    unknown = transitions.after_lost_run(running, NOW, False, "gone")
    assert unknown.status is TaskStatus.FAILED and unknown.error is not None
    assert unknown.error["data"]["reason"] == "OutcomeUnknown"
    last = dataclasses.replace(running, attempt=transitions.MAX_RUNS)
    exhausted = transitions.after_lost_run(last, NOW, True, "worker exited with code 137")
    assert exhausted.error is not None and exhausted.error["data"]["reason"] == "WorkerLost"
    assert "code 137" in exhausted.error["message"]
