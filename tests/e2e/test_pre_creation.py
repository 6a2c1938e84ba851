"""Pre-creation MRTR (SEP-2322 rounds before SEP-2663 task creation): `inputBeforeTask` in a manifest."""

from __future__ import annotations

from typing import Any

from mcp_types import jsonrpc

from tests.conftest import Embedded, McpHttp

YES = {"confirm": {"action": "accept", "content": {"confirm": True}}}
ELICIT_ONLY: dict[str, Any] = {"elicitation": {}}


async def first_round(mcp: McpHttp, caps: dict[str, Any] | None = None) -> dict[str, Any]:
    reply = await mcp.call_tool("confirmed", {}, caps=caps)
    assert reply.result["resultType"] == "input_required"
    assert list(reply.result["inputRequests"]) == ["confirm"]
    assert "taskId" not in reply.result
    return reply.result


async def test_without_the_extension_the_answered_retry_runs_synchronously(mcp: McpHttp, embedded: Embedded) -> None:
    state = (await first_round(mcp, ELICIT_ONLY))["requestState"]
    reply = await mcp.call_tool("confirmed", {}, caps=ELICIT_ONLY, extra={"inputResponses": YES, "requestState": state})
    assert reply.result["content"][0]["text"] == "confirmed=True task=False"
    assert await embedded.store.count() == 0


async def test_with_the_extension_the_answered_retry_creates_one_task_even_if_replayed(mcp: McpHttp) -> None:
    """Our choice: the task id derives from the verified requestState, so a replay returns the same task."""
    state = (await first_round(mcp))["requestState"]
    retry = {"inputResponses": YES, "requestState": state}
    created = (await mcp.call_tool("confirmed", {}, extra=retry)).result
    assert created["resultType"] == "task"
    assert "requestState" not in created and "inputRequests" not in created
    again = (await mcp.call_tool("confirmed", {}, extra=retry)).result
    assert again["taskId"] == created["taskId"]
    done = await mcp.wait_status(created["taskId"], "completed")
    assert done["result"]["content"][0]["text"] == "confirmed=True task=True"


async def test_missing_answers_get_a_fresh_round_and_tampered_state_is_32602(mcp: McpHttp) -> None:
    state = (await first_round(mcp))["requestState"]
    wrong_key = await mcp.call_tool("confirmed", {}, extra={"inputResponses": {"other": {}}, "requestState": state})
    assert wrong_key.result["resultType"] == "input_required"
    tampered = await mcp.call_tool("confirmed", {}, extra={"inputResponses": YES, "requestState": state + "-TAMPERED"})
    assert tampered.error["code"] == jsonrpc.INVALID_PARAMS
    not_an_object = await mcp.call_tool("confirmed", {}, extra={"inputResponses": None, "requestState": state})
    assert "error" in not_an_object.body or not_an_object.result["resultType"] == "input_required"


async def test_a_declined_confirmation_starts_nothing(mcp: McpHttp, embedded: Embedded) -> None:
    state = (await first_round(mcp))["requestState"]
    reply = await mcp.call_tool(
        "confirmed", {}, extra={"inputResponses": {"confirm": {"action": "decline"}}, "requestState": state}
    )
    assert reply.result["isError"] is True
    assert await embedded.store.count() == 0


async def test_a_client_that_cannot_answer_is_told_which_capability_is_missing(mcp: McpHttp) -> None:
    reply = await mcp.call_tool("confirmed", {}, caps={})
    assert reply.error["code"] == jsonrpc.MISSING_REQUIRED_CLIENT_CAPABILITY
    assert reply.error["data"] == {"requiredCapabilities": {"elicitation": {}}}
