"""Handoff for hosts without the tasks extension (issue 34, docs/handoff.md): the official `mcp` Python SDK
client, declaring no extension, in both eras (2026-07-28 `auto` and 2025-11-25 `legacy`), over a real
socket against the embedded server with `MCPTASKS_HANDOFF_DEFAULT=true` and bearer tokens.

Our own choice throughout (SEP-2663 leaves calls without the extension to the server), bounded by its
rules: a request that did not declare the extension never gets `resultType: "task"`, and knowing a task
id is never permission (another principal's id answers exactly as an unknown one).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import aiohttp
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult

from mcp_tasks.gateway import handoff
from mcp_tasks.protocol import constants
from mcp_tasks.protocol.models import TaskStatus
from tests.clients import typescript
from tests.conftest import (
    PLAIN_CAPS,
    TASKS_CAPS,
    TOOL_DIRS,
    Embedded,
    McpHttp,
    server_settings,
    serving,
    until,
    with_tokens,
)

TS_SCRIPT = Path(typescript.__file__).with_name("ts_handoff.mjs")
Mode = Literal["auto", "legacy"]
ERAS: tuple[Mode, ...] = ("auto", "legacy")
ANSWER_BOUND_S = 5.0
"""How long a handed-off call may take to answer in these tests: far below the tools' run time (a 60 s
sleeper), so an answer within it shows the call did not wait for the tool. Not a speed target."""


@pytest.fixture
async def handing_off(tmp_path: Path) -> AsyncIterator[Embedded]:
    """An embedded server with bearer tokens (alice, bob) where every task-capable tool hands off."""
    settings = with_tokens(server_settings(tmp_path / "data"), tmp_path)
    settings = replace(settings, gateway=replace(settings.gateway, handoff_default=True))
    async with serving(settings) as server:
        yield server


@contextlib.asynccontextmanager
async def sdk(server: Embedded, token: str, mode: Mode, **options: Any) -> AsyncIterator[Client]:
    """The SDK client, without the tasks extension, as `token`'s principal, in `mode`'s era (`options`:
    more `Client` arguments, such as a `sampling_callback`, which declares sampling)."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http,
        Client(streamable_http_client(server.url, http_client=http), mode=mode, cache=None, **options) as client,
    ):
        assert client.protocol_version == ("2025-11-25" if mode == "legacy" else constants.PROTOCOL_VERSION)
        yield client


def text_of(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


def structured(result: CallToolResult) -> dict[str, Any]:
    assert isinstance(result.structured_content, dict), result
    return dict(result.structured_content)


async def start(client: Client, tool: str, arguments: dict[str, Any]) -> str:
    """Call a handoff tool; it must answer within `ANSWER_BOUND_S` with a result naming its task."""
    async with asyncio.timeout(ANSWER_BOUND_S):
        result = await client.call_tool(tool, arguments)
    assert not result.is_error, result
    task_id = str(structured(result)["taskId"])
    assert structured(result)["status"] == "working"
    assert structured(result)["pollIntervalMs"] > 0
    assert result.meta is not None and result.meta[constants.META_HANDOFF_TASK_ID] == task_id
    assert task_id in text_of(result) and handoff.STATUS_TOOL in text_of(result)
    return task_id


async def status_until(
    client: Client, task_id: str, *statuses: str, wait_s: float = 2.0, tool: str = handoff.STATUS_TOOL
) -> CallToolResult:
    """`tool` (`task_status` or its new name; it waits on the server's change feed) until the task's status
    is one of `statuses`."""

    async def reached() -> CallToolResult | None:
        result = await client.call_tool(tool, {"taskId": task_id, "waitSeconds": wait_s})
        shown = result.structured_content if isinstance(result.structured_content, dict) else {}
        return (
            result if shown.get("status") in statuses or ("completed" in statuses and "status" not in shown) else None
        )

    return await until(reached, timeout_s=30.0, changed=lambda: asyncio.sleep(0))


@pytest.mark.parametrize("mode", ERAS)
async def test_a_handoff_call_names_a_durable_task_and_task_status_returns_the_tools_own_result(
    handing_off: Embedded, mode: Mode
) -> None:
    """The call answers at once with a complete result naming the task, stored and owned by the caller;
    `task_status` waits for it and answers, once done, exactly the result the tool returned."""
    async with sdk(handing_off, "alice-token", mode) as client:
        task_id = await start(client, "sleeper", {"seconds": 0.3})
        record = await handing_off.store.get(task_id)
        assert record.owner.subject == "alice"
        # one call: the wait ends when the status changes (working → completed), not on the sleeper's
        # progress messages (which would answer "still working")
        result = await client.call_tool(handoff.STATUS_TOOL, {"taskId": task_id, "waitSeconds": 20})
    assert not result.is_error
    assert text_of(result) == "slept 0.3s on attempt 1"
    stored = (await handing_off.store.get(task_id)).result
    assert stored is not None and [block.model_dump(exclude_none=True) for block in result.content] == stored["content"]


@pytest.mark.parametrize("mode", ERAS)
async def test_an_input_request_is_shown_by_task_status_and_answered_with_task_respond(
    handing_off: Embedded, mode: Mode
) -> None:
    """hello_world asks for a name: `task_status` shows the request (text and structured), `task_respond`
    answers it as `tasks/update` does, and the task greets."""
    async with sdk(handing_off, "alice-token", mode) as client:
        task_id = await start(client, "hello_world", {})
        waiting = await status_until(client, task_id, "input_required")
        requests = structured(waiting)["inputRequests"]
        [(key, request)] = requests.items()
        assert request["method"] == "elicitation/create"
        assert handoff.RESPOND_TOOL in text_of(waiting) and f'key "{key}"' in text_of(waiting)
        answered = await client.call_tool(
            handoff.RESPOND_TOOL,
            {"taskId": task_id, "inputResponses": {key: {"action": "accept", "content": {"name": "Luca"}}}},
        )
        assert not answered.is_error, answered
        done = await status_until(client, task_id, "completed")
    assert text_of(done) == "Hello, Luca!"


@pytest.mark.parametrize("mode", ERAS)
async def test_task_cancel_cancels_a_long_task(handing_off: Embedded, mode: Mode) -> None:
    """`task_cancel` asks, as `tasks/cancel` does; `task_status` then shows the task cancelled."""
    async with sdk(handing_off, "alice-token", mode) as client:
        task_id = await start(client, "sleeper", {"seconds": 60})
        cancelled = await client.call_tool(handoff.CANCEL_TOOL, {"taskId": task_id})
        assert not cancelled.is_error, cancelled
        ended = await status_until(client, task_id, "cancelled")
    assert ended.is_error and "cancelled" in text_of(ended)
    assert (await handing_off.store.get(task_id)).status is TaskStatus.CANCELLED


@pytest.mark.parametrize("mode", ERAS)
async def test_another_principals_task_id_is_answered_exactly_like_an_unknown_one(
    handing_off: Embedded, mode: Mode
) -> None:
    """bob's `task_status`, `task_respond` and `task_cancel` on alice's task get the very answer an unknown
    id gets, and change nothing: alice's task still waits for her."""
    async with sdk(handing_off, "alice-token", mode) as alice:
        task_id = await start(alice, "hello_world", {})
        await status_until(alice, task_id, "input_required")
    unknown = "0" * 32
    calls: list[tuple[str, dict[str, Any]]] = [
        (handoff.STATUS_TOOL, {"waitSeconds": 1}),
        (handoff.RESPOND_TOOL, {"inputResponses": {"name": {"action": "accept", "content": {"name": "Bob"}}}}),
        (handoff.CANCEL_TOOL, {}),
    ]
    async with sdk(handing_off, "bob-token", mode) as bob:
        for tool, extra in calls:
            foreign = await bob.call_tool(tool, {"taskId": task_id, **extra})
            missing = await bob.call_tool(tool, {"taskId": unknown, **extra})
            assert foreign.is_error
            assert foreign.model_dump() == missing.model_dump()
            assert text_of(foreign) == handoff.UNKNOWN_TASK_TEXT
    record = await handing_off.store.get(task_id)
    assert record.status is TaskStatus.INPUT_REQUIRED and record.cancel_requested_at is None


@pytest.mark.parametrize("mode", ERAS)
async def test_the_follow_tools_are_listed_only_where_a_handoff_tool_is_visible(
    handing_off: Embedded, embedded: Embedded, mode: Mode
) -> None:
    """Listed after the catalog's tools on a server whose tools hand off, and named in its instructions;
    absent elsewhere, where a call runs synchronously as before."""
    follow = [handoff.STATUS_TOOL, handoff.RESPOND_TOOL, handoff.CANCEL_TOOL]
    sentence = handoff.follow_tools().instructions
    async with sdk(handing_off, "alice-token", mode) as client:
        names = [tool.name for tool in (await client.list_tools()).tools]
        assert client.instructions is not None and client.instructions.endswith(sentence)
    assert names[-3:] == follow
    async with Client(embedded.url, mode=mode, cache=None) as client:
        names = [tool.name for tool in (await client.list_tools()).tools]
        assert client.instructions is not None and sentence not in client.instructions
        assert not set(follow) & set(names)
        refused = await client.call_tool("sleeper", {"seconds": 0})
        assert text_of(refused) == "slept 0s on attempt 1", "no handoff: the call runs synchronously as before"


async def test_with_the_extension_declared_the_same_tool_still_answers_a_task(
    handing_off: Embedded, http_session: aiohttp.ClientSession
) -> None:
    """A request that declares the extension is unchanged (`resultType: "task"`); one that does not, on the
    modern wire, gets `resultType: "complete"` (SEP-2663: never a task to a request that did not declare it)."""
    raw = McpHttp(http_session, handing_off.url, token="alice-token", changed=handing_off.changed)
    with_extension = await raw.call_tool("sleeper", {"seconds": 60}, caps=TASKS_CAPS)
    assert with_extension.result["resultType"] == "task"
    without = await raw.call_tool("sleeper", {"seconds": 60}, caps=PLAIN_CAPS)
    assert without.result["resultType"] == "complete"
    task_id = without.result["structuredContent"]["taskId"]
    assert without.result["_meta"][constants.META_HANDOFF_TASK_ID] == task_id
    owned = await raw.get(task_id)  # the same task, readable by its owner through the extension
    assert owned.result["status"] == "working" and owned.result["taskId"] == task_id
    for created in (with_extension.result["taskId"], task_id):
        assert (await raw.cancel(created)).result == {"resultType": "complete", "_meta": owned.result["_meta"]}


@pytest.fixture
async def handing_off_locally(tmp_path: Path) -> AsyncIterator[Embedded]:
    """An embedded server for the one local principal (no tokens) where every task-capable tool hands off."""
    settings = server_settings(tmp_path)
    async with serving(replace(settings, gateway=replace(settings.gateway, handoff_default=True))) as server:
        yield server


@pytest.mark.parametrize("mode", ERAS)
async def test_the_typescript_client_follows_answers_and_cancels_handed_off_tasks(
    handing_off_locally: Embedded, mode: Mode
) -> None:
    """The official TypeScript client (2.x), no extension: the follow tools are listed; a sleeper's result
    comes back through `task_status`; hello_world's question is answered with `task_respond`; a 60 s
    sleeper is cancelled with `task_cancel`."""
    seen = await typescript.run(handing_off_locally.url, "legacy" if mode == "legacy" else "auto", TS_SCRIPT)
    assert seen["protocolVersion"] == ("2025-11-25" if mode == "legacy" else constants.PROTOCOL_VERSION)
    assert seen["tools"][-3:] == [handoff.STATUS_TOOL, handoff.RESPOND_TOOL, handoff.CANCEL_TOOL]
    task_id = seen["started"]["structured"]["taskId"]
    assert seen["started"]["structured"]["status"] == "working" and task_id in seen["started"]["text"]
    assert seen["started"]["meta"][constants.META_HANDOFF_TASK_ID] == task_id
    assert seen["finished"] == {"text": "slept 0.3s on attempt 1", "isError": False}
    assert seen["asked"] == ["Please enter your name."]
    assert seen["greeted"] == "Hello, Grace!"
    assert seen["cancelled"]["isError"] and "cancelled" in seen["cancelled"]["text"]
    assert (await handing_off_locally.store.get(seen["cancelled"]["taskId"])).status is TaskStatus.CANCELLED


KIND_ASKER = """\
apiVersion: mcptasks.io/v1alpha1
kind: McpTool
metadata: {{name: kind-asker}}
spec:
  name: kind_asker
  description: Asks one input request of the kind given and says what came back.
  inputSchema: {{type: object, properties: {{kind: {{enum: [form, url, sampling, roots]}}}}, required: [kind]}}
  execution: {{taskPolicy: optional, handoff: true}}
  container: {{command: [python, tools.py, kind_asker], workingDir: {tools}}}
"""


@pytest.fixture
async def renamed(tmp_path: Path) -> AsyncIterator[Embedded]:
    """`handing_off` with the follow tools renamed (bg_status, bg_respond, bg_cancel) and `kind_asker`."""
    folder = tmp_path / "asking"
    folder.mkdir()
    (folder / "kind_asker.yaml").write_text(KIND_ASKER.format(tools=TOOL_DIRS[1]))
    settings = with_tokens(server_settings(tmp_path / "data"), tmp_path)
    gateway = replace(
        settings.gateway,
        handoff_default=True,
        handoff_status_tool="bg_status",
        handoff_respond_tool="bg_respond",
        handoff_cancel_tool="bg_cancel",
    )
    settings = replace(settings, serve=replace(settings.serve, tools_dirs=(*TOOL_DIRS, folder)), gateway=gateway)
    async with serving(settings) as server:
        yield server


async def _finished_text(client: Client, task_id: str) -> str:
    """Follow `task_id` with `bg_status` until it completes; its own result's text."""
    return text_of(await status_until(client, task_id, "completed", tool="bg_status"))


@pytest.mark.parametrize("mode", ERAS)
async def test_the_follow_tools_take_the_names_the_settings_give(renamed: Embedded, mode: Mode) -> None:
    """`MCPTASKS_HANDOFF_STATUS_TOOL` and its two siblings rename the follow tools everywhere the model reads
    them (the listing, the instructions, the started text); the default names are then not served."""
    async with sdk(renamed, "alice-token", mode) as client:
        names = [tool.name for tool in (await client.list_tools()).tools]
        assert names[-3:] == ["bg_status", "bg_respond", "bg_cancel"]
        assert client.instructions is not None and "follow it with bg_status" in client.instructions
        started = await client.call_tool("sleeper", {"seconds": 0.2})
        task_id = str(structured(started)["taskId"])
        assert "Call `bg_status`" in text_of(started) and handoff.STATUS_TOOL not in text_of(started)
        assert await _finished_text(client, task_id) == "slept 0.2s on attempt 1"
        with pytest.raises(MCPError, match="unknown tool 'task_status'"):
            await client.call_tool(handoff.STATUS_TOOL, {"taskId": task_id})


@pytest.mark.parametrize("mode", ERAS)
async def test_a_handed_off_task_asks_a_form_question_and_no_kind_its_caller_did_not_declare(
    renamed: Embedded, mode: Mode
) -> None:
    """A host that declared nothing may be asked a form question (the model asks its user and answers with
    `task_respond`); a URL to open, a sampling request or the roots are refused to the tool before anything
    is put (MCP 2026-07-28: no input request of a kind the client did not declare)."""
    async with sdk(renamed, "alice-token", mode) as client:
        for kind, capability in (("url", "elicitation.url"), ("sampling", "sampling"), ("roots", "roots")):
            started = await client.call_tool("kind_asker", {"kind": kind})
            task_id = str(structured(started)["taskId"])
            assert await _finished_text(client, task_id) == f"refused: {capability}", kind
            assert (await renamed.store.get(task_id)).input_requests == {}, kind
        started = await client.call_tool("kind_asker", {"kind": "form"})
        task_id = str(structured(started)["taskId"])
        waiting = await status_until(client, task_id, "input_required", tool="bg_status")
        [(key, request)] = structured(waiting)["inputRequests"].items()
        assert request["method"] == "elicitation/create"
        await client.call_tool(
            "bg_respond", {"taskId": task_id, "inputResponses": {key: {"action": "accept", "content": {"name": "Ada"}}}}
        )
        assert await _finished_text(client, task_id) == 'answered: {"action": "accept", "content": {"name": "Ada"}}'


async def test_a_host_that_declared_sampling_is_asked_for_it_through_the_follow_tools(renamed: Embedded) -> None:
    """On the 2026-07-28 wire the request's own `clientCapabilities` count: a host that declared sampling
    gets the tool's sampling request in `bg_status`, and the model answers it with `bg_respond`."""

    async def never_called(*_: Any) -> Any:
        raise AssertionError("the server never sends requests on a handed-off call")

    async with sdk(renamed, "alice-token", "auto", sampling_callback=never_called) as client:
        started = await client.call_tool("kind_asker", {"kind": "sampling"})
        task_id = str(structured(started)["taskId"])
        record = await renamed.store.get(task_id)
        assert record.client_capabilities is not None and "sampling" in record.client_capabilities
        waiting = await status_until(client, task_id, "input_required", tool="bg_status")
        [(key, request)] = structured(waiting)["inputRequests"].items()
        assert request["method"] == "sampling/createMessage"
        answer = {"role": "assistant", "content": {"type": "text", "text": "hello"}, "model": "m"}
        await client.call_tool("bg_respond", {"taskId": task_id, "inputResponses": {key: answer}})
        assert (await _finished_text(client, task_id)).startswith("answered: ")
