"""`subscriptions/listen` with `taskIds`: ack first, `notifications/tasks` with full DetailedTasks, graceful end."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
from mcp_types import jsonrpc

from mcp_tasks.protocol import constants
from tests.conftest import PLAIN_CAPS, McpHttp, server_settings, start_embedded


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


async def test_a_quiet_listen_stream_carries_keepalive_comments(
    tmp_path: Path, http_session: aiohttp.ClientSession
) -> None:
    """Our choice (SSE comments are encouraged): a keepalive after `listen_keepalive_s` without a frame."""
    settings = server_settings(tmp_path)
    settings = replace(settings, gateway=replace(settings.gateway, listen_keepalive_s=0.3))
    server, web_runner = await start_embedded(settings)
    try:
        client = McpHttp(http_session, server.url)
        task_id = await client.start_task("confirm_delete", {"filename": "quiet.txt"})
        await client.wait_status(task_id, "input_required")

        body, headers = client.prepare("subscriptions/listen", {"notifications": {"taskIds": [task_id]}})
        lines: list[str] = []
        async with http_session.post(server.url, data=body, headers=headers) as response, asyncio.timeout(10):
            async for raw in response.content:  # the stream stays quiet until the task is answered
                lines.append(raw.decode().rstrip("\r\n"))
                if lines[-1] == ": keepalive" and lines.count(": keepalive") == 1:
                    await client.update(task_id, {"confirm": {"action": "accept", "content": {"confirm": True}}})
        assert ": keepalive" in lines
        assert frames("\n".join(lines))[-1]["id"] is not None, "the stream then ends with its result"
    finally:
        await web_runner.cleanup()
