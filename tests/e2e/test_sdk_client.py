"""The official `mcp` Python SDK (2.3.x) as the client, over a real socket, against the embedded server."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import ElicitRequestParams, ElicitResult

from mcp_tasks.client import TaskCancelled, TaskFailed, TasksClientExtension
from mcp_tasks.protocol.models import GetTaskResult, TaskStatus
from tests.conftest import REPO, Embedded, McpHttp, until
from tests.controlplane.cluster import free_port


def answering(content: dict[str, Any]) -> Any:
    async def elicit(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        return ElicitResult(action="accept", content=content)

    return elicit


async def test_sdk_client_discovers_and_lists_tools_in_a_stable_order(embedded: Embedded) -> None:
    """server/discover and tools/list work with the SDK's auto mode (MCP 2026-07-28 §discover, §tools)."""
    async with Client(embedded.url, cache=None) as client:
        assert client.protocol_version == "2026-07-28"
        first = [tool.name for tool in (await client.list_tools()).tools]
        second = [tool.name for tool in (await client.list_tools()).tools]
    assert first == second
    assert first[0] == "test_simple_text"
    assert {"greet", "slow_compute", "hello_world"} <= set(first)


async def test_sdk_client_calls_a_sync_tool_without_a_task(embedded: Embedded) -> None:
    """A `never` tool answers a plain CallToolResult even when the client declares the extension (our policy)."""
    async with Client(embedded.url, extensions=[TasksClientExtension()], cache=None) as client:
        result = await client.call_tool("greet", {"name": "World"})
    assert result.content[0].text == "Hello, World!"  # type: ignore[union-attr]
    assert not result.is_error
    assert await embedded.store.count() == 0


async def test_hello_world_in_input_rounds_for_an_sdk_client_without_the_extension(embedded: Embedded) -> None:
    """SEP-2322 on an ordinary call: the SDK answers the `InputRequiredResult` with its elicitation
    callback and retries with `inputResponses` + `requestState`; the same run greets. No task is shown."""
    async with Client(embedded.url, elicitation_callback=answering({"name": "Luca"}), cache=None) as client:
        result = await client.call_tool("hello_world", {})
    assert result.content[0].text == "Hello, Luca!"  # type: ignore[union-attr]
    assert result.is_error is False
    assert await embedded.store.count() == 1  # the one hidden task that held the run between rounds


async def test_hello_world_flow_of_the_sep_with_the_sdk_client(embedded: Embedded) -> None:
    """SEP-2663 Example Message Flow: task → input_required (key `name`) → tasks/update → `Hello, Luca!`."""
    seen: list[GetTaskResult] = []

    async def record(task: GetTaskResult) -> None:
        seen.append(task)

    async with Client(
        embedded.url,
        extensions=[TasksClientExtension(on_update=record)],
        elicitation_callback=answering({"input": "Luca"}),
        cache=None,
    ) as client:
        result = await client.call_tool("hello_world", {})
    assert result.content[0].text == "Hello, Luca!"  # type: ignore[union-attr]
    assert result.is_error is False
    statuses = [task.status.value for task in seen]
    assert "input_required" in statuses and statuses[-1] == "completed"
    asked = next(task for task in seen if task.status.value == "input_required")
    assert asked.input_requests is not None and list(asked.input_requests) == ["name"]
    assert asked.input_requests["name"]["method"] == "elicitation/create"


async def test_sdk_client_resolves_pre_creation_input_then_a_task(embedded: Embedded) -> None:
    """Pre-creation MRTR (SEP-2663): the SDK answers the InputRequiredResult, then follows the task."""
    async with Client(
        embedded.url,
        extensions=[TasksClientExtension()],
        elicitation_callback=answering({"name": "Alice"}),
        cache=None,
    ) as client:
        result = await client.call_tool("test_tool_with_task", {})
    assert "Alice" in result.content[0].text  # type: ignore[union-attr]


async def test_sdk_client_sees_a_failed_task_as_its_json_rpc_error(embedded: Embedded) -> None:
    """`failed` carries a JSON-RPC error (SEP-2663 Task Execution Errors)."""
    async with Client(embedded.url, extensions=[TasksClientExtension()], cache=None) as client:
        with pytest.raises(TaskFailed) as raised:
            await client.call_tool("protocol_error_job", {})
    assert raised.value.code == -32603


async def test_sdk_client_without_the_extension_gets_missing_capability_for_a_required_task_tool(
    embedded: Embedded,
) -> None:
    """A `required` tool and a non-declaring client: -32021 (SEP-2663 Negotiation)."""
    async with Client(embedded.url, cache=None) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("failing_job", {})
    assert raised.value.code == -32021


async def test_with_the_extension_a_call_that_is_no_task_still_gets_its_input_rounds(embedded: Embedded) -> None:
    """A `never` tool that asks mid-run answers an `InputRequiredResult`; the SDK drives the rounds."""
    async with Client(
        embedded.url, extensions=[TasksClientExtension()], elicitation_callback=answering({"name": "Ada"}), cache=None
    ) as client:
        result = await client.call_tool("test_input_required_result_elicitation", {})
    assert result.content[0].text == "Hello, Ada!"  # type: ignore[union-attr]


async def test_a_caller_that_stops_waiting_cancels_its_task(embedded: Embedded) -> None:
    task_ids: list[str] = []
    seen = asyncio.Event()

    async def record(task: GetTaskResult) -> None:
        task_ids.append(task.task_id)
        seen.set()

    async with Client(embedded.url, extensions=[TasksClientExtension(on_update=record)], cache=None) as client:
        waiting = asyncio.create_task(client.call_tool("slow_compute", {"seconds": 30, "label": "abandoned"}))
        async with asyncio.timeout(10):
            await seen.wait()
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting

    async def cancelled() -> bool:
        return (await embedded.store.get(task_ids[0])).status is TaskStatus.CANCELLED

    await until(cancelled, changed=embedded.changed)


async def test_a_known_task_can_be_resumed_and_another_cancelled(embedded: Embedded, mcp: McpHttp) -> None:
    """After a restart a client keeps only the `taskId`: `resume` follows it, `cancel` stops one."""
    finishing = await mcp.start_task("slow_compute", {"seconds": 0.5, "label": "resumed"})
    running = await mcp.start_task("slow_compute", {"seconds": 30, "label": "stopped"})
    extension = TasksClientExtension()
    async with Client(embedded.url, extensions=[extension], cache=None) as client:
        result = await extension.resume(client.session, finishing)
        assert result.content[0].text == "Computed resumed in 0.5s"  # type: ignore[union-attr]
        await extension.cancel(client.session, running)
        with pytest.raises(TaskCancelled):
            await extension.resume(client.session, running)
        with pytest.raises(MCPError) as unknown:
            await extension.resume(client.session, "0" * 32)
    assert unknown.value.error.code == -32602


async def test_the_readme_example_client_asks_on_the_terminal_and_prints_the_greeting(embedded: Embedded) -> None:
    """`examples/hello_client.py`, run as README's "Try it" runs it: a process answering from its stdin."""
    hello = await asyncio.create_subprocess_exec(
        sys.executable,
        str(REPO / "examples" / "hello_client.py"),
        embedded.url,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(hello.communicate(b"Ada\n"), timeout=60)
    assert hello.returncode == 0, err.decode()
    assert "Please enter your name." in out.decode() and out.decode().rstrip().endswith("Hello, Ada!")


async def test_the_readme_example_client_says_in_one_line_what_is_wrong() -> None:
    """No server there: one line naming the URL and the likely cause, not the SDK's traceback."""
    nobody = f"http://127.0.0.1:{free_port()}/mcp"
    hello = await asyncio.create_subprocess_exec(
        sys.executable,
        str(REPO / "examples" / "hello_client.py"),
        nobody,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(hello.communicate(), timeout=60)
    assert hello.returncode == 1
    assert err.decode().strip().splitlines() == [
        f"{nobody}: ConnectError: All connection attempts failed (is `make run` serving there?)"
    ]
