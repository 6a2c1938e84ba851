"""Every client gets every tool: multi-round-trip input on ordinary calls (SEP-2322), capability-aware
input requests, progress on the POST's stream, custom headers and structured results, on the embedded
server over a real socket with real tool processes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from mcp_types import jsonrpc
from multidict import CIMultiDict

from mcp_tasks.protocol import constants
from mcp_tasks.protocol.models import TaskStatus
from mcp_tasks.tasks.record import TaskRecord
from tests.conftest import PLAIN_CAPS, Embedded, McpHttp, reported, server_settings, serving

FORM_CAPS: dict[str, Any] = {"elicitation": {}}


def accept(**content: Any) -> dict[str, Any]:
    return {"action": "accept", "content": content}


async def test_a_client_without_the_tasks_extension_answers_a_run_in_rounds(mcp: McpHttp, embedded: Embedded) -> None:
    """R1 → `InputRequiredResult`; R2 answers and the same run asks again under a fresh key and a new
    `requestState`; R3 → the final result. One durable execution: one hidden task, never restarted."""
    first = (await mcp.call_tool("asker", {}, caps=FORM_CAPS)).result
    assert first["resultType"] == "input_required"
    assert list(first["inputRequests"]) == ["q"]
    assert first["inputRequests"]["q"]["method"] == "elicitation/create"
    state = first["requestState"]
    assert isinstance(state, str) and "taskId" not in first

    second = (
        await mcp.call_tool(
            "asker", {}, caps=FORM_CAPS, extra={"inputResponses": {"q": accept(a="A")}, "requestState": state}
        )
    ).result
    assert second["resultType"] == "input_required"
    (key,) = second["inputRequests"]
    assert key != "q", "an input key is never reused within the run's life"
    assert second["requestState"] != state

    third = (
        await mcp.call_tool(
            "asker",
            {},
            caps=FORM_CAPS,
            extra={"inputResponses": {key: accept(b="B")}, "requestState": second["requestState"]},
        )
    ).result
    assert third["resultType"] == "complete"
    assert third["content"][0]["text"] == "A B"
    assert await embedded.store.count() == 1


async def test_missing_answers_are_asked_again_and_unknown_keys_ignored(mcp: McpHttp) -> None:
    first = (await mcp.call_tool("asker", {}, caps=FORM_CAPS)).result
    again = (
        await mcp.call_tool(
            "asker",
            {},
            caps=FORM_CAPS,
            extra={"inputResponses": {"nobody_asked": accept(x=1)}, "requestState": first["requestState"]},
        )
    ).result
    assert again["resultType"] == "input_required"
    assert list(again["inputRequests"]) == ["q"]


async def test_an_answer_that_does_not_fit_its_request_is_invalid_params(mcp: McpHttp) -> None:
    first = (await mcp.call_tool("asker", {}, caps=FORM_CAPS)).result
    reply = await mcp.call_tool(
        "asker", {}, caps=FORM_CAPS, extra={"inputResponses": {"q": 12345}, "requestState": first["requestState"]}
    )
    assert reply.error["code"] == jsonrpc.INVALID_PARAMS
    assert "'q'" in reply.error["message"]
    reply = await mcp.call_tool(
        "asker", {}, caps=FORM_CAPS, extra={"inputResponses": None, "requestState": first["requestState"]}
    )
    assert reply.error["code"] == jsonrpc.INVALID_PARAMS


async def test_answers_offered_up_front_are_used_without_a_round(mcp: McpHttp) -> None:
    """SEP-2322: a client may send `inputResponses` before being asked; a fitting one answers the ask."""
    reply = await mcp.call_tool(
        "test_input_required_result_elicitation",
        {},
        caps=FORM_CAPS,
        extra={"inputResponses": {"user_name": accept(name="Alice"), "extra": {"x": 1}}},
    )
    assert reply.result["resultType"] == "complete"
    assert reply.result["content"][0]["text"] == "Hello, Alice!"


async def test_a_plain_call_is_never_asked_for_input_it_did_not_declare(mcp: McpHttp, embedded: Embedded) -> None:
    """No `elicitation` declared: the tool's ask fails inside the tool (nothing is shown, nothing stored)."""
    reply = await mcp.call_tool("asker", {}, caps=PLAIN_CAPS)
    assert reply.result["resultType"] == "complete" and reply.result["isError"] is True
    assert "'elicitation'" in reply.result["content"][0]["text"]
    assert await embedded.store.count() == 0


async def test_a_tool_asks_only_for_the_kinds_its_client_declared(mcp: McpHttp) -> None:
    """`ClientLacksCapability.capability` lets a tool fall back: sampling only, never elicitation."""
    reply = await mcp.call_tool("test_input_required_result_capabilities", {}, caps={"sampling": {}})
    methods = {request["method"] for request in reply.result["inputRequests"].values()}
    assert methods == {"sampling/createMessage"}


async def test_a_tampered_foreign_or_spent_request_state_is_refused(
    secured: Embedded, http_session: aiohttp.ClientSession
) -> None:
    alice = McpHttp(http_session, secured.url, token="alice-token")
    bob = McpHttp(http_session, secured.url, token="bob-token")
    first = (await alice.call_tool("test_input_required_result_elicitation", {}, caps=FORM_CAPS)).result
    state = first["requestState"]
    answer = {"inputResponses": {"user_name": accept(name="Alice")}}
    for who, sent in ((alice, state + "-TAMPERED"), (bob, state)):
        refused = await who.call_tool(
            "test_input_required_result_elicitation", {}, caps=FORM_CAPS, extra={**answer, "requestState": sent}
        )
        assert refused.error["code"] == jsonrpc.INVALID_PARAMS
        assert "requestState" in refused.error["message"]
    done = await alice.call_tool(
        "test_input_required_result_elicitation", {}, caps=FORM_CAPS, extra={**answer, "requestState": state}
    )
    assert done.result["content"][0]["text"] == "Hello, Alice!"
    replayed = await alice.call_tool(
        "test_input_required_result_elicitation", {}, caps=FORM_CAPS, extra={**answer, "requestState": state}
    )
    assert replayed.error["code"] == jsonrpc.INVALID_PARAMS
    assert "already ended" in replayed.error["message"]


@pytest.fixture
async def short_rounds(tmp_path: Path) -> AsyncIterator[Embedded]:
    settings = server_settings(tmp_path / "data")
    async with serving(replace(settings, gateway=replace(settings.gateway, request_state_ttl_s=1))) as server:
        yield server


async def test_a_run_whose_client_never_comes_back_is_stopped(
    short_rounds: Embedded, http_session: aiohttp.ClientSession
) -> None:
    """The parked run is watched only until its `requestState` expires; then its executor cancels it."""
    written: list[TaskRecord] = []
    ended = asyncio.Event()

    def observe(before: TaskRecord | None, after: TaskRecord) -> None:
        written.append(after)
        if after.status.is_terminal:
            ended.set()

    remove = short_rounds.store.observe(observe)
    try:
        mcp = McpHttp(http_session, short_rounds.url)
        await mcp.call_tool("asker", {}, caps=FORM_CAPS)
        async with asyncio.timeout(15):
            await ended.wait()
    finally:
        remove()
    assert {record.task_id for record in written} == {written[0].task_id}
    assert written[-1].status is TaskStatus.CANCELLED
    assert "nobody is waiting" in (written[-1].status_message or "")


async def sse_messages(response: aiohttp.ClientResponse) -> list[dict[str, Any]]:
    messages = []
    async for line in response.content:
        if line.startswith(b"data: "):
            messages.append(json.loads(line[6:]))
    return messages


async def call_with_progress(
    http_session: aiohttp.ClientSession,
    url: str,
    mcp: McpHttp,
    request_id: int,
    tool: str,
    arguments: dict[str, Any],
    token: str,
) -> list[dict[str, Any]]:
    """A synchronous `tools/call` of `tool` with `_meta.progressToken` `token`, accepting SSE; every message of
    the stream (it must be one), in order."""
    meta = {**mcp.envelope(PLAIN_CAPS), constants.META_PROGRESS_TOKEN: token}
    body = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments, "_meta": meta},
    }
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        constants.HEADER_PROTOCOL_VERSION: constants.PROTOCOL_VERSION,
        constants.HEADER_METHOD: "tools/call",
        constants.HEADER_NAME: tool,
    }
    async with http_session.post(url, data=json.dumps(body), headers=headers) as response:
        assert response.content_type == "text/event-stream"
        return await sse_messages(response)


async def test_progress_of_a_synchronous_call_streams_on_its_own_post(
    embedded: Embedded, http_session: aiohttp.ClientSession, mcp: McpHttp
) -> None:
    """`_meta.progressToken` → `notifications/progress` on this POST's SSE stream, then the response."""
    messages = await call_with_progress(http_session, embedded.url, mcp, 7, "test_tool_with_progress", {}, "p-1")
    *progress, final = messages
    assert [m["params"]["progress"] for m in progress] == [0, 50, 100]
    assert all(m["method"] == "notifications/progress" and m["params"]["progressToken"] == "p-1" for m in progress)
    assert progress[-1]["params"]["total"] == 100 and progress[-1]["params"]["message"] == "100% done"
    assert final["id"] == 7 and final["result"]["content"][0]["text"] == "Progress complete"

    plain = await mcp.call_tool("test_tool_with_progress", {}, caps=PLAIN_CAPS)
    assert plain.headers["Content-Type"].startswith("application/json")


async def test_the_example_count_primes_streams_progress_to_a_synchronous_call(
    embedded: Embedded, http_session: aiohttp.ClientSession, mcp: McpHttp
) -> None:
    """README "Try it" (a newcomer saw none): the shipped `count_primes` reports with `ctx.progress`, so a
    synchronous call with a `progressToken` gets `notifications/progress` with its `total`, then the result."""
    limit = {"limit": 1_000_000}
    messages = await call_with_progress(http_session, embedded.url, mcp, 8, "count_primes", limit, "primes")
    *progress, final = messages
    assert progress and all(m["method"] == "notifications/progress" for m in progress), messages
    assert progress[-1]["params"] == {
        "progressToken": "primes",
        "progress": 1_000_000,
        "total": 1_000_000,
        "message": "sieved 100% (1000000 of 1000000)",
    }
    assert final["result"]["structuredContent"] == {"limit": 1_000_000, "primeCount": 78498}


async def test_progress_of_a_task_is_its_status_message(mcp: McpHttp) -> None:
    task_id = await mcp.start_task("count_primes", {"limit": 3_000_000})
    task = await mcp.wait_task(task_id, lambda t: reported(t) or t["status"] == "completed")
    assert task["statusMessage"] and reported(task)
    await mcp.cancel(task_id)


async def test_structured_content_is_checked_against_the_output_schema(mcp: McpHttp) -> None:
    good = (await mcp.call_tool("good_structured", {}, caps=PLAIN_CAPS)).result
    assert good["structuredContent"] == {"count": 3} and not good.get("isError")
    bad = (await mcp.call_tool("bad_structured", {}, caps=PLAIN_CAPS)).result
    assert bad["isError"] is True
    text = bad["content"][0]["text"]
    assert text.startswith("The tool returned an invalid result") and "outputSchema" in text and "count" in text
    assert "Traceback" not in text


async def test_a_nested_argument_mirrored_into_a_header_is_checked(mcp: McpHttp) -> None:
    """SEP-2243: `x-mcp-header` on a property reached through `properties`; 400/-32020 on a mismatch."""
    listed = (await mcp.request("tools/list", caps=PLAIN_CAPS)).result["tools"]
    (schema,) = [tool["inputSchema"] for tool in listed if tool["name"] == "region_echo"]
    assert schema["properties"]["target"]["properties"]["region"]["x-mcp-header"] == "Region"
    arguments = {"target": {"region": "eu-west"}}
    missing = await mcp.call_tool("region_echo", arguments, caps=PLAIN_CAPS)
    assert missing.status == 400 and missing.error["code"] == jsonrpc.HEADER_MISMATCH
    wrong = await mcp.call_tool("region_echo", arguments, caps=PLAIN_CAPS, headers={"Mcp-Param-Region": "us-east"})
    assert wrong.status == 400 and wrong.error["code"] == jsonrpc.HEADER_MISMATCH
    encoded = "=?base64?ZXUtd2VzdA==?="
    good = await mcp.call_tool("region_echo", arguments, caps=PLAIN_CAPS, headers={"Mcp-Param-Region": encoded})
    assert good.result["content"][0]["text"] == "region=eu-west"
    absent = await mcp.call_tool("region_echo", {"target": {}}, caps=PLAIN_CAPS)
    assert absent.result["content"][0]["text"] == "region=None"


async def test_each_round_speaks_for_itself_about_capabilities(mcp: McpHttp) -> None:
    """A retry that no longer declares `elicitation` cannot answer (or be shown) elicitation requests."""
    first = (await mcp.call_tool("asker", {}, caps=FORM_CAPS)).result
    reply = await mcp.call_tool(
        "asker",
        {},
        caps=PLAIN_CAPS,
        extra={"inputResponses": {"q": accept(a="A")}, "requestState": first["requestState"]},
    )
    assert reply.status == 400 and reply.error["code"] == jsonrpc.MISSING_REQUIRED_CLIENT_CAPABILITY
    assert reply.error["data"]["requiredCapabilities"] == {"elicitation": {}}


async def test_a_follower_that_leaves_does_not_stop_the_run_for_another(
    mcp: McpHttp, embedded: Embedded, http_session: aiohttp.ClientSession
) -> None:
    first = (await mcp.call_tool("ask_then_work", {"seconds": 2}, caps=FORM_CAPS)).result
    retry = {"inputResponses": {"word": accept(word="kept")}, "requestState": first["requestState"]}
    staying = asyncio.create_task(mcp.call_tool("ask_then_work", {"seconds": 2}, caps=FORM_CAPS, extra=retry))
    leaving = McpHttp(http_session, embedded.url)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.5):
            await leaving.call_tool("ask_then_work", {"seconds": 2}, caps=FORM_CAPS, extra=retry)
    done = (await staying).result
    assert done["content"][0]["text"] == "worked on kept" and not done.get("isError")


@pytest.fixture
async def two_rounds_per_tenant(tmp_path: Path) -> AsyncIterator[Embedded]:
    async with serving(server_settings(tmp_path / "data", max_input_rounds=3)) as server:
        yield server


async def test_parked_runs_are_bounded_and_take_no_task_slots(
    two_rounds_per_tenant: Embedded, http_session: aiohttp.ClientSession
) -> None:
    mcp = McpHttp(http_session, two_rounds_per_tenant.url)
    for _ in range(2):  # one tenant (anonymous) holds at most half the places, rounded up
        assert (await mcp.call_tool("asker", {}, caps=FORM_CAPS)).result["resultType"] == "input_required"
    refused = (await mcp.call_tool("asker", {}, caps=FORM_CAPS)).result
    assert refused["isError"] is True and "MCPTASKS_MAX_INPUT_ROUNDS" in refused["content"][0]["text"]
    task_id = await mcp.start_task("slow_compute", {"seconds": 0.2, "label": "unblocked"})
    assert (await mcp.wait_status(task_id, "completed"))["result"]["content"][0]["text"] == "Computed unblocked in 0.2s"


async def test_a_routing_header_sent_twice_with_different_values_is_refused(
    embedded: Embedded, http_session: aiohttp.ClientSession, mcp: McpHttp
) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {"name": "greet", "arguments": {"name": "x"}, "_meta": mcp.envelope(PLAIN_CAPS)},
    }
    headers = [
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        (constants.HEADER_PROTOCOL_VERSION, constants.PROTOCOL_VERSION),
        (constants.HEADER_METHOD, "tools/call"),
        (constants.HEADER_NAME, "greet"),
        (constants.HEADER_NAME, "test_simple_text"),
    ]
    async with http_session.post(embedded.url, data=json.dumps(body), headers=CIMultiDict(headers)) as response:
        assert response.status == 400
        assert (await response.json())["error"]["code"] == jsonrpc.HEADER_MISMATCH


async def test_a_mirrored_header_without_its_argument_is_refused(mcp: McpHttp) -> None:
    reply = await mcp.call_tool("region_echo", {}, caps=PLAIN_CAPS, headers={"Mcp-Param-Region": "eu"})
    assert reply.status == 400 and reply.error["code"] == jsonrpc.HEADER_MISMATCH
