"""`subscriptions/listen` with `taskIds`: ack first, `notifications/tasks` with full DetailedTasks, graceful end."""

from __future__ import annotations

import json
from typing import Any

from mcp_types import jsonrpc

from mcp_tasks.protocol import constants
from tests.conftest import PLAIN_CAPS, McpHttp


def frames(body: str) -> list[dict[str, Any]]:
    return [json.loads(line[len("data: ") :]) for line in body.splitlines() if line.startswith("data: ")]


async def test_listen_streams_task_changes_until_the_task_is_terminal(mcp: McpHttp) -> None:
    """SEP-2575 §subscriptions + SEP-2663 §Notifications; every frame is tagged with the listen request's id."""
    task_id = await mcp.start_task("slow_compute", {"seconds": 0.5, "label": "watched"})
    reply = await mcp.request(
        "subscriptions/listen",
        {"notifications": {"taskIds": [task_id, "not-a-task"], "toolsListChanged": True}},
        request_id="listen-1",
    )
    assert reply.headers["Content-Type"].startswith("text/event-stream")
    messages = frames(reply.body)
    ack = messages[0]
    assert ack["method"] == constants.NOTIFICATION_SUBSCRIPTION_ACK
    assert ack["params"]["notifications"] == {"taskIds": [task_id]}
    for message in messages[:-1]:
        assert message["params"]["_meta"][constants.META_SUBSCRIPTION_ID] == "listen-1"
    updates = [m["params"] for m in messages[1:-1]]
    assert all(m["method"] == constants.NOTIFICATION_TASKS for m in messages[1:-1])
    assert updates[-1]["status"] == "completed"
    assert updates[-1]["result"]["content"][0]["text"] == "Computed watched in 0.5s"
    assert "resultType" not in updates[-1]
    final = messages[-1]
    assert final["id"] == "listen-1"
    assert final["result"]["_meta"][constants.META_SUBSCRIPTION_ID] == "listen-1"


async def test_listen_for_task_ids_without_the_extension_is_32021_as_json(mcp: McpHttp) -> None:
    reply = await mcp.request("subscriptions/listen", {"notifications": {"taskIds": ["x"]}}, caps=PLAIN_CAPS)
    assert reply.status == 400
    assert reply.error["code"] == jsonrpc.MISSING_REQUIRED_CLIENT_CAPABILITY
