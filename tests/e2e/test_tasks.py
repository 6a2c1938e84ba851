"""Task behaviour end to end: input flow, cancellation, failure model, results and artifacts, expiry, listen."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from mcp_types import jsonrpc

from mcp_tasks.protocol import constants
from tests.conftest import PLAIN_CAPS, Embedded, McpHttp, Reply, reported, until

ACCEPT_ALL = {"action": "accept", "content": {"name": "partial-1", "confirm": True}}


async def test_partial_answers_leave_the_rest_pending_and_unknown_keys_are_ignored(mcp: McpHttp) -> None:
    """SEP-2663 `tasks/update`: answered keys leave before the ack; unknown keys are acked and ignored."""
    task_id = await mcp.start_task("multi_input")
    task = await mcp.wait_task(task_id, lambda t: len(t.get("inputRequests", {})) == 2)
    assert task["status"] == "input_required"
    first, second = list(task["inputRequests"])

    ack = await mcp.update(task_id, {"unknown-key": {"ignored": True}})
    assert ack.result == {"resultType": "complete", "_meta": ack.result["_meta"]}
    assert set((await mcp.get(task_id)).result["inputRequests"]) == {first, second}

    await mcp.update(task_id, {first: ACCEPT_ALL})
    after = (await mcp.get(task_id)).result
    assert after["status"] == "input_required"
    assert list(after["inputRequests"]) == [second]

    await mcp.update(task_id, {first: ACCEPT_ALL, second: {"action": "decline"}})
    done = await mcp.wait_status(task_id, "completed")
    assert done["result"]["content"][0]["text"] == "Received partial-1 and decline"
    assert "inputRequests" not in done


async def test_input_keys_are_never_reused_within_a_task(mcp: McpHttp) -> None:
    """SEP-2663: each key is unique for the task's lifetime, even when the tool suggests the same one twice."""
    task_id = await mcp.start_task("asker")
    first = await mcp.wait_status(task_id, "input_required")
    assert list(first["inputRequests"]) == ["q"]
    await mcp.update(task_id, {"q": {"action": "accept", "content": {"a": "one"}}})
    second = await mcp.wait_task(task_id, lambda t: "q-2" in t.get("inputRequests", {}))
    assert list(second["inputRequests"]) == ["q-2"]
    await mcp.update(task_id, {"q": {"action": "accept", "content": {"b": "stale"}}})
    assert list((await mcp.get(task_id)).result["inputRequests"]) == ["q-2"]
    await mcp.update(task_id, {"q-2": {"action": "accept", "content": {"b": "two"}}})
    done = await mcp.wait_status(task_id, "completed")
    assert done["result"]["content"][0]["text"] == "one two"


async def test_a_round_of_input_requests_sent_again_is_asked_once(mcp: McpHttp) -> None:
    """A worker that sends its round again with the same `roundId` (its first answer was lost) gets the same
    key, and the client sees one request, not a second copy it would have to answer too; a worker that asks
    again for an answer it took gets it again; a malformed `roundId` is refused with 400 and issues nothing."""
    task_id = await mcp.start_task("round_resender")
    asked = await mcp.wait_status(task_id, "input_required")
    assert list(asked["inputRequests"]) == ["go"]
    await mcp.update(task_id, {"go": {"action": "accept", "content": {"ok": True}}})
    done = await mcp.wait_status(task_id, "completed", "failed")
    assert done["result"]["content"][0]["text"] == "400 go go accept accept", done


async def test_cancel_of_a_running_task_acks_at_once_then_settles_cancelled(mcp: McpHttp) -> None:
    task_id = await mcp.start_task("slow_compute", {"seconds": 60, "label": "c"})
    await mcp.wait_task(task_id, reported)
    ack = await mcp.cancel(task_id)
    assert set(ack.result) == {"resultType", "_meta"}
    done = await mcp.wait_status(task_id, "cancelled", "completed", "failed")
    assert done["status"] == "cancelled"


async def test_cancel_reaches_a_tool_that_ignores_sigterm(mcp: McpHttp) -> None:
    """Cooperative cancel: SIGTERM, grace period, then SIGKILL (our runner's contract)."""
    task_id = await mcp.start_task("stubborn")
    await mcp.wait_task(task_id, lambda t: t.get("statusMessage") == "ignoring SIGTERM")
    await mcp.cancel(task_id)
    assert (await mcp.wait_status(task_id, "cancelled"))["status"] == "cancelled"


async def test_cancel_of_a_finished_task_is_the_same_ack_and_changes_nothing(mcp: McpHttp) -> None:
    """SEP-2663: cancelling a terminal task is acknowledged (reverses 2025-11-25's -32602)."""
    task_id = await mcp.start_task("slow_compute", {"seconds": 0, "label": "quick"})
    done = await mcp.wait_status(task_id, "completed")
    ack = await mcp.cancel(task_id)
    assert ack.result["resultType"] == "complete"
    assert (await mcp.get(task_id)).result == {**done, "_meta": done["_meta"]}


async def test_tool_error_completes_with_is_error_and_protocol_error_fails(mcp: McpHttp) -> None:
    """SEP-2663 Task Execution Errors: `completed` + `isError` for tool errors, `failed` + error otherwise."""
    failing = await mcp.start_task("failing_job")
    done = await mcp.wait_status(failing, "completed", "failed")
    assert done["status"] == "completed" and done["result"]["isError"] is True
    assert done["result"]["resultType"] == "complete"
    assert done["result"]["_meta"][constants.META_SERVER_INFO]["name"] == "mcp-tasks"

    broken = await mcp.start_task("protocol_error_job")
    failed = await mcp.wait_status(broken, "completed", "failed")
    assert failed["status"] == "failed"
    assert failed["error"]["code"] == jsonrpc.INTERNAL_ERROR and "result" not in failed
    assert failed["statusMessage"]


async def test_a_tool_that_exits_without_a_result_completes_with_its_stderr_tail(mcp: McpHttp) -> None:
    """The one outcome rule (docs/tool-runtime.md), the same text as on Kubernetes (tests/kube/test_operator.py)."""
    task_id = await mcp.start_task("crasher")
    done = await mcp.wait_status(task_id, "completed", "failed")
    assert done["status"] == "completed" and done["result"]["isError"] is True
    text = done["result"]["content"][0]["text"]
    assert text.startswith("Tool 'crasher' exited with code 3 without a result. Its last output:\n")
    assert "the disk is on fire" in text


async def test_a_task_past_its_maximum_run_time_fails(mcp: McpHttp) -> None:
    task_id = await mcp.start_task("short_deadline", {"seconds": 30})
    done = await mcp.wait_status(task_id, "completed", "failed", "cancelled")
    assert done["status"] == "failed"
    assert "maximum run time" in done["statusMessage"]


async def test_optional_tool_runs_synchronously_for_a_non_declaring_client(mcp: McpHttp, embedded: Embedded) -> None:
    """SEP-2663: never `resultType: "task"` to a request that did not declare the extension."""
    reply = await mcp.call_tool("slow_compute", {"seconds": 0, "label": "sync"}, caps=PLAIN_CAPS)
    assert reply.result["resultType"] == "complete"
    assert reply.result["content"][0]["text"] == "Computed sync in 0s"
    assert await embedded.store.count() == 0


async def test_a_large_result_becomes_an_owner_readable_resource_link(mcp: McpHttp) -> None:
    """Past the 256 KiB inline cap a result becomes an artifact behind a `resource_link` (ARCHITECTURE.md)."""
    size = 300 * 1024
    task_id = await mcp.start_task("big_result", {"size": size})
    done = await mcp.wait_status(task_id, "completed")
    assert len(json.dumps(done)) < 4096
    link = next(block for block in done["result"]["content"] if block["type"] == "resource_link")
    read = await mcp.request("resources/read", {"uri": link["uri"]})
    content = json.loads(read.result["contents"][0]["text"])
    assert content["content"][0]["text"] == "x" * size
    missing = await mcp.request("resources/read", {"uri": link["uri"].replace(task_id, "0" * 32)})
    assert missing.error["code"] == jsonrpc.INVALID_PARAMS
    assert missing.error["data"]["uri"] == link["uri"].replace(task_id, "0" * 32)


async def test_a_finished_task_is_readable_until_created_plus_ttl_then_gone(mcp: McpHttp, embedded: Embedded) -> None:
    """SEP-2663 TTL: retrievable within `ttlMs`; after it the task answers like an unknown id and is swept."""
    task_id = await mcp.start_task("short_ttl", {"seconds": 0})
    done = await mcp.wait_status(task_id, "completed")
    assert done["ttlMs"] >= 1500

    async def expired() -> Reply | None:  # by the clock alone: no write tells of it
        reply = await mcp.get(task_id)
        return reply if "error" in reply.body else None

    reply = await until(expired, timeout_s=10)
    assert reply.error["message"] == "Failed to retrieve task: Task not found"

    async def swept() -> bool:
        return await embedded.store.count() == 0

    await until(swept, timeout_s=10, changed=embedded.changed)


async def test_a_task_that_runs_past_its_ttl_is_readable_after_it_ends(mcp: McpHttp) -> None:
    """Our rule (docs/design.md §11): a run longer than its `ttlMs` (1.5 s here, no lease renewal in
    between) ends readable for that `ttlMs` again, never already expired."""
    task_id = await mcp.start_task("short_ttl", {"seconds": 2.5})
    done = await mcp.wait_status(task_id, "completed")
    assert done["ttlMs"] >= 2_500 + 1_500, done
    assert (await mcp.get(task_id)).result["status"] == "completed"


async def test_a_running_task_is_never_expired_its_ttl_grows(mcp: McpHttp) -> None:
    """SEP-2663: `ttlMs` MAY change; ours grows while the task runs so a long task never disappears."""
    task_id = await mcp.start_task("slow_compute", {"seconds": 60, "label": "long"})
    first = (await mcp.get(task_id)).result
    assert first["ttlMs"] >= 3_600_000
    await mcp.cancel(task_id)
    await mcp.wait_status(task_id, "cancelled")


async def test_a_task_never_asks_for_input_its_client_did_not_declare(mcp: McpHttp) -> None:
    """MCP 2026-07-28: no input request of a kind the client did not declare. The client declared only the
    tasks extension: the tool's elicitation fails inside the tool, which ends with a tool error saying so."""
    only_tasks: dict[str, Any] = {"extensions": {constants.TASKS_EXTENSION: {}}}
    created = await mcp.call_tool("hello_world", {}, caps=only_tasks)
    task_id = created.result["taskId"]
    seen: list[str] = []

    def finished(task: dict[str, Any]) -> bool:
        seen.append(str(task["status"]))
        return task["status"] in ("completed", "failed", "cancelled")

    done = await mcp.wait_task(task_id, finished)
    assert "input_required" not in seen and "inputRequests" not in done
    assert done["status"] == "completed" and done["result"]["isError"] is True, done
    text = done["result"]["content"][0]["text"]
    assert "'elicitation'" in text and "clientCapabilities" in text, text


async def test_waiting_for_input_does_not_spend_the_run_time_but_has_its_own_limit(mcp: McpHttp) -> None:
    """`maxRunTimeSeconds` (3 s) counts working time only: a 3.5 s wait for the answer is not held against
    it. One unanswered wait past `maxInputWaitSeconds` (10 s: the answer below may take a few seconds on a busy
    machine) ends the task, saying so."""
    answered = await mcp.start_task("patient_asker", {"seconds": 0.2})
    asked = await mcp.wait_status(answered, "input_required")
    # Stays: 3.5 s of real time in input_required is what is under test; the tool's own process keeps real time.
    # The limit leaves the tool 3 s of working time (start-up, asking, the answer's way back) on busy cores.
    await asyncio.sleep(3.5)
    (key,) = asked["inputRequests"]
    await mcp.update(answered, {key: {"action": "accept", "content": {"word": "late"}}})
    done = await mcp.wait_status(answered, "completed", "failed")
    assert done["status"] == "completed" and done["result"]["content"][0]["text"] == "worked on late", done

    unanswered = await mcp.start_task("patient_asker", {"seconds": 0})
    ended = await mcp.wait_status(unanswered, "completed", "failed", timeout_s=20)
    assert ended["status"] == "failed"
    assert "maxInputWaitSeconds" in ended["statusMessage"] and "10s" in ended["statusMessage"], ended
