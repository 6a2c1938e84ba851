"""Handoff (issue 34, docs/handoff.md) through more hosts' own client code, without the tasks extension,
against the embedded server with bearer tokens (alice, bob) where every task-capable tool hands off:

- the official TypeScript SDK 1.x (`@modelcontextprotocol/sdk`, `tests/clients/ts_handoff_v1.mjs`), the
  2025-11-25 era (`initialize`) most hosts ship today;
- `mcp-remote`, the stdio-to-Streamable-HTTP bridge desktop hosts run for remote servers, spawned with a
  static bearer header and spoken to over its stdin/stdout as a host does, in its default (`legacy`) and
  `--protocol auto` modes.

Both are pinned by version and tarball integrity (`tests.clients.typescript.SDK_V1`, `MCP_REMOTE`) and
installed with npm into a cache folder of their own; without npm the tests skip, as the 2.x client's do.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from mcp_tasks.gateway import handoff
from mcp_tasks.protocol import constants
from mcp_tasks.protocol.models import TaskStatus
from tests.clients import mcp_remote, typescript
from tests.conftest import Embedded, server_settings, serving, with_tokens

V1_SCRIPT = Path(typescript.__file__).with_name("ts_handoff_v1.mjs")
FOLLOW_TOOLS = [handoff.STATUS_TOOL, handoff.RESPOND_TOOL, handoff.CANCEL_TOOL]
BRIDGE_MODES = {"legacy": (), "auto": ("--protocol", "auto")}
"""mcp-remote's `--protocol` modes and their flags: `legacy` (its default) passes the host's `initialize`
through; `auto` finds our 2026-07-28 era with `server/discover` and rewrites every request into it."""


@pytest.fixture
async def handing_off(tmp_path: Path) -> AsyncIterator[Embedded]:
    """An embedded server with bearer tokens (alice, bob) where every task-capable tool hands off."""
    settings = with_tokens(server_settings(tmp_path / "data"), tmp_path)
    settings = replace(settings, gateway=replace(settings.gateway, handoff_default=True))
    async with serving(settings) as server:
        yield server


async def test_the_typescript_sdk_1x_follows_answers_and_cancels_handed_off_tasks(handing_off: Embedded) -> None:
    """SDK 1.x, no extension, legacy era: the call answers at once naming alice's task; `task_status`
    returns the sleeper's own result; hello_world's question is answered with `task_respond`; a 60 s
    sleeper is cancelled with `task_cancel`; bob's three calls on alice's waiting task get exactly the
    answers an unknown id gets, and her task still waits."""
    seen = await typescript.run_pinned(typescript.SDK_V1, V1_SCRIPT, handing_off.url, "alice-token", "bob-token")
    assert seen["protocolVersion"] == "2025-11-25"
    assert seen["tools"][-3:] == FOLLOW_TOOLS
    started = seen["started"]
    task_id = started["structured"]["taskId"]
    assert started["structured"]["status"] == "working" and task_id in started["text"]
    assert started["meta"][constants.META_HANDOFF_TASK_ID] == task_id
    assert (await handing_off.store.get(task_id)).owner.subject == "alice"
    assert seen["finished"] == {"text": "slept 0.3s on attempt 1", "isError": False, "taskId": task_id}
    assert seen["asked"] == ["Please enter your name."]
    assert seen["responded"]["isError"] is False
    assert seen["greeted"] == "Hello, Ada!"
    assert seen["cancel"]["isError"] is False
    assert seen["cancelled"]["isError"] and "cancelled" in seen["cancelled"]["text"]
    assert (await handing_off.store.get(seen["cancelled"]["taskId"])).status is TaskStatus.CANCELLED
    for tool, answers in seen["foreign"].items():
        assert answers["foreign"] == answers["unknown"], tool
        assert answers["foreign"]["isError"] is True, tool
        assert answers["foreign"]["content"] == [{"type": "text", "text": handoff.UNKNOWN_TASK_TEXT}], tool
    assert seen["stillPending"] == "input_required"
    pending = await handing_off.store.get(seen["pending"])
    assert pending.status is TaskStatus.INPUT_REQUIRED and pending.cancel_requested_at is None


async def test_the_typescript_sdk_1x_can_hand_off_a_tool_that_declares_an_output_schema(
    handing_off: Embedded,
) -> None:
    """The 1.x client validates every result of a tool with an outputSchema against the listed one (as the
    spec lets a client do): a tool that hands off lists a schema that admits its handoff answer too, so the
    answer passes, and `task_status` then returns the tool's own result (a helper's finding: the 1.x client
    refused the answer with -32602)."""
    seen = await typescript.run_pinned(
        typescript.SDK_V1, V1_SCRIPT, handing_off.url, "alice-token", "bob-token", "output-schema"
    )
    assert "thrown" not in seen["started"], seen["started"]
    assert seen["finished"]["structuredContent"] == {"limit": 1000, "primeCount": 168}


async def initialized(bridge: mcp_remote.Bridge) -> dict[str, Any]:
    """The host's handshake through the bridge, as a 2025-11-25 host without the extension sends it."""
    answer = await bridge.request(
        "initialize",
        {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "a-host", "version": "0"}},
    )
    await bridge.notify("notifications/initialized")
    assert answer["result"]["protocolVersion"] == "2025-11-25", answer
    result: dict[str, Any] = answer["result"]
    return result


async def follow(bridge: mcp_remote.Bridge, task_id: str, done: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """`task_status` (waiting up to 2 s on the server each time) until `done(result)`; at most 40 calls."""
    for _ in range(40):
        result = await bridge.call_tool(handoff.STATUS_TOOL, {"taskId": task_id, "waitSeconds": 2})
        assert result.get("resultType") != "task", result
        if done(result):
            return result
    raise AssertionError(f"task {task_id} did not get there")


def status_of(result: dict[str, Any]) -> str | None:
    """The task status a follow tool's result shows; None for the finished tool's own result."""
    shown = result.get("structuredContent")
    return shown.get("status") if isinstance(shown, dict) else None


def text_of(result: dict[str, Any]) -> str:
    return "".join(block.get("text", "") for block in result["content"])


async def start(bridge: mcp_remote.Bridge, tool: str, arguments: dict[str, Any]) -> str:
    """Call a handoff tool through the bridge: a complete result (never `resultType: "task"`) naming the task."""
    result = await bridge.call_tool(tool, arguments)
    assert result.get("resultType") != "task" and not result["isError"], result
    task_id = str(result["structuredContent"]["taskId"])
    assert result["structuredContent"]["status"] == "working" and task_id in text_of(result)
    assert result["_meta"][constants.META_HANDOFF_TASK_ID] == task_id
    return task_id


@pytest.mark.parametrize("mode", BRIDGE_MODES)
async def test_mcp_remote_bridges_a_host_through_a_handoff_to_the_tools_result(
    handing_off: Embedded, tmp_path: Path, mode: str
) -> None:
    """A host on mcp-remote with a static bearer header, no extension: the follow tools are listed; a
    sleeper's result comes back through `task_status`; hello_world's question is answered with
    `task_respond`; a 60 s sleeper is cancelled with `task_cancel`. No sign-in was started."""
    folder = tmp_path / "bridge"
    async with mcp_remote.bridged(handing_off.url, "alice-token", folder, *BRIDGE_MODES[mode]) as bridge:
        await initialized(bridge)
        tools = await bridge.request("tools/list")
        assert [tool["name"] for tool in tools["result"]["tools"]][-3:] == FOLLOW_TOOLS

        quick = await start(bridge, "sleeper", {"seconds": 0.3})
        assert (await handing_off.store.get(quick)).owner.subject == "alice"
        finished = await follow(bridge, quick, lambda result: status_of(result) is None)
        assert (text_of(finished), finished["isError"]) == ("slept 0.3s on attempt 1", False)
        # the modern era's results carry the server's identity in _meta: auto mode really spoke it
        assert (constants.META_SERVER_INFO in finished["_meta"]) is (mode == "auto")

        hello = await start(bridge, "hello_world", {})
        waiting = await follow(bridge, hello, lambda result: status_of(result) == "input_required")
        keys = list(waiting["structuredContent"]["inputRequests"])
        answers = {key: {"action": "accept", "content": {"name": "Linus"}} for key in keys}
        responded = await bridge.call_tool(handoff.RESPOND_TOOL, {"taskId": hello, "inputResponses": answers})
        assert not responded["isError"], responded
        greeted = await follow(bridge, hello, lambda result: status_of(result) is None)
        assert text_of(greeted) == "Hello, Linus!"

        long = await start(bridge, "sleeper", {"seconds": 60})
        cancel = await bridge.call_tool(handoff.CANCEL_TOOL, {"taskId": long})
        assert not cancel["isError"], cancel
        cancelled = await follow(bridge, long, lambda result: status_of(result) == "cancelled")
        assert cancelled["isError"] and "cancelled" in text_of(cancelled)
        log = bridge.log()
    assert (await handing_off.store.get(long)).status is TaskStatus.CANCELLED
    assert "Please authorize" not in log and "Browser opened" not in log, log
    assert not [path for path in (folder / "config").rglob("*") if path.is_file()], "no OAuth state was stored"


@pytest.mark.parametrize("mode", BRIDGE_MODES)
async def test_through_mcp_remote_another_principals_task_id_answers_like_an_unknown_one(
    handing_off: Embedded, tmp_path: Path, mode: str
) -> None:
    """bob's bridge asks `task_status` about alice's task: the very answer an unknown id gets."""
    flags = BRIDGE_MODES[mode]
    async with mcp_remote.bridged(handing_off.url, "alice-token", tmp_path / "alice", *flags) as alice:
        await initialized(alice)
        task_id = await start(alice, "sleeper", {"seconds": 60})
    async with mcp_remote.bridged(handing_off.url, "bob-token", tmp_path / "bob", *flags) as bob:
        await initialized(bob)
        foreign = await bob.call_tool(handoff.STATUS_TOOL, {"taskId": task_id, "waitSeconds": 1})
        unknown = await bob.call_tool(handoff.STATUS_TOOL, {"taskId": "0" * 32, "waitSeconds": 1})
    assert foreign == unknown
    assert foreign["isError"] and text_of(foreign) == handoff.UNKNOWN_TASK_TEXT
    assert (await handing_off.store.get(task_id)).status is TaskStatus.WORKING
