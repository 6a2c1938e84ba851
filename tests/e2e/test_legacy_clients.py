"""Legacy-era (2025-11-25) clients on the same endpoint, with no session state: the official Python SDK in
its `legacy` mode over a real socket, and raw HTTP for the answer-routing, session-id and cancel edge cases."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import ElicitRequestParams, ElicitResult

from mcp_tasks.gateway import legacy_calls, legacy_sessions
from mcp_tasks.protocol import constants
from mcp_tasks.protocol.errors import InvalidRequest
from mcp_tasks.protocol.models import TaskStatus
from mcp_tasks.store.sqlite import SqliteTaskStore
from mcp_tasks.tasks.inline import INLINE_TTL_MS
from mcp_tasks.tasks.interfaces import utc_now
from mcp_tasks.tasks.owner import LOCAL_OWNER
from tests.conftest import Embedded, server_settings, start_embedded, until

LEGACY = "2025-11-25"
HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    constants.HEADER_PROTOCOL_VERSION: LEGACY,
}


def answering(content: dict[str, Any]) -> Any:
    async def elicit(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        return ElicitResult(action="accept", content=content)

    return elicit


async def test_the_sdk_in_legacy_mode_initializes_lists_and_calls_without_a_session(embedded: Embedded) -> None:
    """`initialize` selects the legacy era; the `Mcp-Session-Id` it gets holds no server state; a `never`
    tool answers as before."""
    async with Client(embedded.url, mode="legacy", cache=None) as client:
        assert client.protocol_version == LEGACY
        names = [tool.name for tool in (await client.list_tools()).tools]
        assert names[0] == "test_simple_text" and {"greet", "hello_world", "sleeper"} <= set(names)
        result = await client.call_tool("greet", {"name": "World"})
    assert result.content[0].text == "Hello, World!"  # type: ignore[union-attr]
    assert await embedded.store.count() == 0, "a quick tool is no task, in the legacy era too"


async def test_hello_world_elicits_on_the_call_stream_and_completes(embedded: Embedded) -> None:
    """A `required` tool runs as a hidden task; its `elicitation/create` reaches the legacy client on the
    POST's SSE stream, and the SDK's answer, POSTed back, resumes the task through the store."""
    asked: list[ElicitRequestParams] = []

    async def elicit(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        asked.append(params)
        return ElicitResult(action="accept", content={"name": "Luca"})

    async with Client(embedded.url, mode="legacy", elicitation_callback=elicit, cache=None) as client:
        result = await client.call_tool("hello_world", {})
    assert result.content[0].text == "Hello, Luca!"  # type: ignore[union-attr]
    assert not result.is_error
    assert [params.message for params in asked] == ["Please enter your name."]


async def test_a_client_without_an_elicitation_handler_gets_a_tool_error_naming_it(embedded: Embedded) -> None:
    """The stateless server cannot know what `initialize` declared: it asks, and the client's refusal
    becomes `ClientLacksCapability` in the tool, so the call ends with `isError` instead of hanging."""
    async with Client(embedded.url, mode="legacy", cache=None) as client:
        result = await asyncio.wait_for(client.call_tool("hello_world", {}), 30)
    assert result.is_error
    text = result.content[0].text  # type: ignore[union-attr]
    assert "elicitation/create" in text and "declares it" in text, text


async def test_progress_reaches_a_legacy_client_that_sent_a_progress_token(embedded: Embedded) -> None:
    """Also: the official Python SDK echoes the `Mcp-Session-Id` of `initialize` on its calls, so its call
    is open under a session (its hidden task's id is scoped by it)."""
    updates: list[tuple[float, str | None]] = []
    sessions: set[str | None] = set()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        updates.append((progress, message))
        sessions.update(key.session for key in embedded.services.live_calls._calls)

    async with Client(embedded.url, mode="legacy", cache=None) as client:
        result = await client.call_tool("sleeper", {"seconds": 1.5}, progress_callback=on_progress)
    assert result.content[0].text.startswith("slept 1.5s")  # type: ignore[union-attr]
    assert updates, "notifications/progress on the call's stream"
    assert [p for p, _ in updates] == sorted({p for p, _ in updates}), "progress only increases"
    assert all(message and message.startswith("sleeping") for _, message in updates)
    assert sessions and None not in sessions, "the SDK sent the Mcp-Session-Id it was given"


async def legacy_post(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], list[dict[str, Any]]]:
    """POST one legacy message; return status, headers and every JSON-RPC message of a JSON or SSE reply."""
    async with session.post(url, data=json.dumps(body), headers={**HEADERS, **(headers or {})}) as response:
        text = await response.text()
        if response.content_type == "text/event-stream":
            messages = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]
        else:
            messages = [json.loads(text)] if text else []
        return response.status, dict(response.headers), messages


async def open_call(
    session: aiohttp.ClientSession,
    url: str,
    request_id: int,
    name: str,
    arguments: dict[str, Any],
    headers: dict[str, str] | None = None,
) -> tuple[aiohttp.ClientResponse, asyncio.Queue[dict[str, Any]], asyncio.Task[None]]:
    """Start a legacy `tools/call` and feed its SSE messages into a queue as they arrive."""
    body = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }
    response = await session.post(url, data=json.dumps(body), headers={**HEADERS, **(headers or {})})
    assert response.content_type == "text/event-stream"
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def pump() -> None:
        async for line in response.content:
            if line.startswith(b"data: "):
                await queue.put(json.loads(line[6:]))

    return response, queue, asyncio.create_task(pump())


async def test_initialize_names_served_versions_and_the_modern_surface_is_unchanged(
    embedded: Embedded, http_session: aiohttp.ClientSession
) -> None:
    init: dict[str, Any] = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2099-01-01", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
    }
    status, headers, [reply] = await legacy_post(http_session, embedded.url, init, {"MCP-Protocol-Version": ""})
    assert status == 200 and legacy_sessions.session_nonce(
        embedded.services.settings.request_state_secret, LOCAL_OWNER, headers[constants.HEADER_SESSION_ID]
    ), "a signed session id, nothing stored"
    assert reply["result"]["protocolVersion"] == LEGACY, "an unknown revision gets our newest legacy one"
    assert set(reply["result"]["capabilities"]) == {"tools", "resources"}, "no legacy tasks capability"
    init["params"]["protocolVersion"] = "2025-06-18"
    _, _, [reply] = await legacy_post(http_session, embedded.url, init)
    assert reply["result"]["protocolVersion"] == "2025-06-18"
    for method in ("tasks/result", "tasks/list", "tasks/get", "logging/setLevel"):
        status, _, [reply] = await legacy_post(
            http_session, embedded.url, {"jsonrpc": "2.0", "id": 2, "method": method}
        )
        assert reply["error"]["code"] == -32601, (method, reply)
    status, _, [reply] = await legacy_post(
        http_session,
        embedded.url,
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "greet", "arguments": {"name": "x"}, "task": {"ttl": 1}},
        },
    )
    assert reply["result"]["content"][0]["text"] == "Hello, x!" and "resultType" not in reply["result"]


async def test_answers_are_routed_by_an_unguessable_id_bound_to_the_principal(
    embedded: Embedded, http_session: aiohttp.ClientSession
) -> None:
    """Forged, altered or late answers are refused alike; a genuine one resumes the task."""
    response, queue, pump = await open_call(http_session, embedded.url, 7, "hello_world", {})
    try:
        ask = await asyncio.wait_for(queue.get(), 30)
        assert ask["method"] == "elicitation/create" and ask["id"].startswith("mcptasks-input.")
        task_id = ask["id"].split(".")[1]
        forged = ask["id"][:-4] + ("0000" if not ask["id"].endswith("0000") else "1111")
        for bad_id in (forged, "mcptasks-input.x.y.z", ask["id"].replace(task_id, "0" * 32)):
            status, _, [reply] = await legacy_post(
                http_session, embedded.url, {"jsonrpc": "2.0", "id": bad_id, "result": {"action": "accept"}}
            )
            assert (status, reply["error"]["code"], reply["id"]) == (400, -32602, None), bad_id
        status, _, [reply] = await legacy_post(
            http_session, embedded.url, {"jsonrpc": "2.0", "id": ask["id"], "result": {"content": {}}}
        )
        assert status == 400 and "action" in reply["error"]["message"], "an ElicitResult needs its action"
        status, _, messages = await legacy_post(
            http_session,
            embedded.url,
            {"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "accept", "content": {"name": "Ada"}}},
        )
        assert (status, messages) == (202, [])
        final = await asyncio.wait_for(queue.get(), 30)
        assert final["id"] == 7 and final["result"]["content"][0]["text"] == "Hello, Ada!"
        status, _, [reply] = await legacy_post(
            http_session, embedded.url, {"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "accept"}}
        )
        assert status == 400 and reply["error"]["code"] == -32602, "an answer after the call ended is refused"
        record = await embedded.store.get(task_id)
        assert record.status is TaskStatus.COMPLETED
    finally:
        pump.cancel()
        response.close()


async def cancel_notification(
    session: aiohttp.ClientSession, url: str, request_id: int, headers: dict[str, str] | None = None
) -> None:
    body = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": request_id}}
    status, _, _ = await legacy_post(session, url, body, headers)
    assert status == 202


async def status_of(embedded: Embedded, task_id: str) -> TaskStatus:
    return (await embedded.store.get(task_id)).status


async def until_terminal(embedded: Embedded, task_id: str) -> TaskStatus:
    async def terminal() -> TaskStatus | None:
        status = await status_of(embedded, task_id)
        return status if status.is_terminal else None

    return await until(terminal, timeout_s=20, changed=embedded.changed)


async def test_notifications_cancelled_stops_the_call_and_it_gets_no_response(
    embedded: Embedded, http_session: aiohttp.ClientSession
) -> None:
    """2025-11-25 cancellation: the hidden task is cancelled (cooperatively) and the call's stream ends
    without a response; the finished hidden task is kept `INLINE_TTL_MS`, not its tool's hour."""
    response, queue, pump = await open_call(http_session, embedded.url, 11, "sleeper", {"seconds": 30})
    try:
        task_id = await wait_for_hidden_task(embedded)
        await cancel_notification(http_session, embedded.url, 11)
        await asyncio.wait_for(pump, 30)  # the stream ended
        assert queue.empty(), "no response to a cancelled request"
        record = await embedded.store.get(task_id)
        assert record.status is TaskStatus.CANCELLED
        assert record.ttl_ms <= INLINE_TTL_MS + 30_000, record.ttl_ms
    finally:
        pump.cancel()
        response.close()


async def test_an_ambiguous_cancellation_is_ignored_and_a_disconnect_still_cancels(
    embedded: Embedded, http_session: aiohttp.ClientSession
) -> None:
    """Without a session header, two live calls of one principal may share a JSON-RPC id (ids restart
    with each connection): `notifications/cancelled` then stops neither, rather than maybe the wrong one.
    A client that goes away mid-call always stops its own call."""
    opened = []
    try:
        opened.append(await open_call(http_session, embedded.url, 12, "sleeper", {"seconds": 30}))
        a = await wait_for_hidden_task(embedded)  # the first call's task, before the second exists
        opened.append(await open_call(http_session, embedded.url, 12, "sleeper", {"seconds": 30}))
        b = await wait_for_hidden_task(embedded, not_in={a})
        first, _, pump_a = opened[0]
        await cancel_notification(http_session, embedded.url, 12)  # acted on (or not) before its 202
        assert [await status_of(embedded, a), await status_of(embedded, b)] == [TaskStatus.WORKING] * 2
        pump_a.cancel()
        first.close()  # one client goes away: its call, and only its call, is cancelled
        assert await until_terminal(embedded, a) is TaskStatus.CANCELLED
        assert await status_of(embedded, b) is TaskStatus.WORKING
    finally:
        for response, _, pump in opened:
            pump.cancel()
            response.close()
    assert await until_terminal(embedded, b) is TaskStatus.CANCELLED


async def test_malformed_replies_and_reply_ids_are_refused_with_400(
    embedded: Embedded, http_session: aiohttp.ClientSession
) -> None:
    """No reply shape reaches the store unchecked: lone surrogates, bad ids, bad error objects."""
    response, queue, pump = await open_call(http_session, embedded.url, 13, "hello_world", {})
    try:
        ask = await asyncio.wait_for(queue.get(), 30)
        reply_id = ask["id"]
        bad: list[str] = [
            f'{{"jsonrpc":"2.0","id":"{reply_id}","result":{{"action":"accept","content":{{"name":"a\\ud800b"}}}}}}',
            f'{{"jsonrpc":"2.0","id":"{reply_id}","error":{{"code":-1,"message":"\\udfff"}}}}',
            '{"jsonrpc":"2.0","id":"mcptasks-input.abc.bmFtZQ.\u00e9","result":{}}',
            '{"jsonrpc":"2.0","id":"mcptasks-input.\\ud800.bmFtZQ.00","result":{}}',
            f'{{"id":"{reply_id}","result":{{"action":"accept"}}}}',
            f'{{"jsonrpc":"2.0","id":"{reply_id}","error":{{}}}}',
            f'{{"jsonrpc":"2.0","id":"{reply_id}","error":{{"code":"x","message":"m"}}}}',
            f'{{"jsonrpc":"2.0","id":"{reply_id}","result":[1]}}',
            f'{{"jsonrpc":"2.0","id":"{reply_id}","result":{{}},"error":{{"code":1,"message":"m"}}}}',
        ]
        for body in bad:
            async with http_session.post(embedded.url, data=body, headers=HEADERS) as answer:
                assert answer.status == 400, (body, answer.status, await answer.text())
                assert (await answer.json())["id"] is None
        good = {"jsonrpc": "2.0", "id": reply_id, "error": {"code": -32601, "message": "Method not found"}}
        status, _, _ = await legacy_post(http_session, embedded.url, good)
        assert status == 202
        final = await asyncio.wait_for(queue.get(), 30)
        assert final["result"]["isError"] is True and "elicitation/create" in final["result"]["content"][0]["text"]
    finally:
        pump.cancel()
        response.close()


async def test_a_headerless_legacy_client_gets_legacy_answers_for_unserved_methods(
    embedded: Embedded, http_session: aiohttp.ClientSession
) -> None:
    """A 2025-03-26 client sends no `MCP-Protocol-Version`: unserved methods are -32601 (HTTP 200) and
    `resources/templates/list` is an empty list, not the modern "_meta is required"."""
    plain = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    for method, expected in (("resources/templates/list", "result"), ("prompts/list", -32601)):
        async with http_session.post(
            embedded.url, data=json.dumps({"jsonrpc": "2.0", "id": 1, "method": method}), headers=plain
        ) as answer:
            body = await answer.json()
        assert answer.status == 200, body
        assert (
            (body["result"]["resourceTemplates"] == []) if expected == "result" else body["error"]["code"] == expected
        )


async def wait_for_hidden_task(embedded: Embedded, not_in: set[str] | None = None) -> str:
    """The id of the one running hidden task (not in `not_in`), once the runner has it."""

    async def fresh() -> str | None:
        rows = await embedded.store._w.execute_fetchall("SELECT task_id FROM tasks")
        ids = [str(row[0]) for row in rows if row[0] not in (not_in or set())]
        return ids[0] if ids else None

    return await until(fresh, timeout_s=15, changed=embedded.changed)


async def test_a_legacy_request_sent_with_a_modern_envelope_stays_modern(
    embedded: Embedded, http_session: aiohttp.ClientSession
) -> None:
    """An `initialize` with a modern `_meta` is still -32601 with HTTP 404 (the modern-only behaviour)."""
    meta = {constants.META_PROTOCOL_VERSION: constants.PROTOCOL_VERSION, constants.META_CLIENT_CAPABILITIES: {}}
    body = {"jsonrpc": "2.0", "id": 5, "method": "initialize", "params": {"_meta": meta}}
    headers = {constants.HEADER_PROTOCOL_VERSION: constants.PROTOCOL_VERSION, constants.HEADER_METHOD: "initialize"}
    status, _, [reply] = await legacy_post(http_session, embedded.url, body, headers)
    assert (status, reply["error"]["code"]) == (404, -32601)


async def test_the_modern_sdk_still_negotiates_the_modern_era(embedded: Embedded) -> None:
    async with Client(embedded.url, cache=None) as client:
        assert client.protocol_version == constants.PROTOCOL_VERSION
    async with Client(embedded.url, mode="legacy", cache=None) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("no_such_tool", {})
    assert "unknown tool 'no_such_tool'" in str(raised.value), "a legacy error reaches the caller as JSON-RPC"


async def test_a_stopping_server_ends_open_legacy_calls_and_cancels_their_work(
    tmp_path: Path, http_session: aiohttp.ClientSession
) -> None:
    """Shutdown does not wait for a legacy call to end by itself: the call gets a -32603 saying to call
    again, and its hidden task is cancelled (nobody could read its result)."""
    server, web_runner = await start_embedded(server_settings(tmp_path))
    response, queue, pump = await open_call(http_session, server.url, 21, "sleeper", {"seconds": 60})
    try:
        task_id = await wait_for_hidden_task(server)
        started = asyncio.get_running_loop().time()
        await web_runner.cleanup()
        assert asyncio.get_running_loop().time() - started < 8
        final = await asyncio.wait_for(queue.get(), 5)
        assert final["id"] == 21 and "shutting down" in final["error"]["message"]
    finally:
        pump.cancel()
        response.close()
    async with SqliteTaskStore(tmp_path / "tasks.sqlite3") as store:
        record = await store.get(task_id)
    assert record.cancel_requested_at is not None


async def test_a_tool_that_asks_before_it_starts_works_for_a_legacy_client(embedded: Embedded) -> None:
    """`inputBeforeTask` has no pre-creation round in the legacy era: the runtime asks it in-task, on the
    call's stream, before the tool's code runs; a declined answer means the tool never starts."""
    asked: list[str] = []

    def answering_confirm(confirm: bool) -> Any:
        async def elicit(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
            asked.append(params.message)
            if not confirm:
                return ElicitResult(action="decline")
            return ElicitResult(action="accept", content={"confirm": True})

        return elicit

    async with Client(embedded.url, mode="legacy", elicitation_callback=answering_confirm(True), cache=None) as ok:
        purged = await ok.call_tool("purge_cache", {"prefix": "legacy"})
    async with Client(embedded.url, mode="legacy", elicitation_callback=answering_confirm(False), cache=None) as no:
        declined = await no.call_tool("purge_cache", {"prefix": "legacy"})
    assert not purged.is_error and "Purged" in purged.content[0].text, purged  # type: ignore[union-attr]
    assert declined.is_error and "Not started" in declined.content[0].text  # type: ignore[union-attr]
    assert len(asked) == 2


SESSION = constants.HEADER_SESSION_ID


async def initialize(session: aiohttp.ClientSession, url: str) -> dict[str, str]:
    """`initialize` as the SDKs do it: the headers the client's later requests carry (its session id, if any)."""
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
    }
    status, headers, [reply] = await legacy_post(session, url, init)
    assert status == 200 and reply["result"]["protocolVersion"] == LEGACY
    return {SESSION: headers[SESSION]} if SESSION in headers else {}


async def call_to_the_end(
    session: aiohttp.ClientSession,
    url: str,
    request_id: int,
    name: str,
    arguments: dict[str, Any],
    headers: dict[str, str],
) -> dict[str, Any]:
    """A legacy `tools/call` from start to its response (the call's stream closes after it)."""
    response, queue, pump = await open_call(session, url, request_id, name, arguments, headers)
    try:
        async with asyncio.timeout(30):
            while "id" not in (message := await queue.get()) or "method" in message:
                pass
        return message
    finally:
        pump.cancel()
        response.close()


async def task_ids(embedded: Embedded) -> set[str]:
    rows = await embedded.store._w.execute_fetchall("SELECT task_id FROM tasks")
    return {str(row[0]) for row in rows}


async def wait_for_status(embedded: Embedded, task_id: str, wanted: TaskStatus) -> None:
    """Wait (10 s at most) on the store's change feed until `task_id` has status `wanted`."""
    async with asyncio.timeout(10):
        while (await embedded.store.get(task_id)).status is not wanted:
            await embedded.store.wait_for_change(1.0, task_id)


@pytest.mark.parametrize("with_session", [True, False], ids=["session", "no-session-header"])
async def test_a_repeated_request_id_after_the_earlier_hidden_task_expired_runs_as_a_new_task(
    embedded: Embedded, http_session: aiohttp.ClientSession, with_session: bool
) -> None:
    """Real clients start every connection at the same JSON-RPC id (the Inspector CLI and
    langchain-mcp-adapters call with id 1). Our rule: a legacy call's hidden task id never repeats an
    earlier call's, even one whose task has expired (the Kubernetes operator skips a task name it saw
    deleted, so a reused name never ran there): scoped by the session's nonce, or random without one."""
    earlier: set[str] = set()
    for _ in range(2):
        headers = await initialize(http_session, embedded.url) if with_session else {}
        final = await call_to_the_end(http_session, embedded.url, 1, "sleeper", {"seconds": 0}, headers)
        assert final["id"] == 1 and final["result"]["content"][0]["text"].startswith("slept"), final
        hidden = await task_ids(embedded)
        assert len(hidden) == 1 and not hidden & earlier, "a new task id, not the expired task's"
        earlier |= hidden
        expired = await embedded.store.delete_expired(utc_now() + timedelta(days=1), 100)  # as expiry does
        assert set(expired) == hidden


async def test_a_cancel_in_a_session_stops_that_sessions_call_when_request_ids_repeat(
    embedded: Embedded, http_session: aiohttp.ClientSession
) -> None:
    """2025-11-25 `utilities/cancellation`: the TypeScript SDK and mcp-remote send
    `notifications/cancelled` and keep the call's stream open. Ids repeat across sessions and a finished
    call's task is kept 60 s; the cancel stops the open call of the session that sent it, and only it."""
    done = await initialize(http_session, embedded.url)
    assert done, "initialize issues an Mcp-Session-Id"
    await call_to_the_end(http_session, embedded.url, 1, "sleeper", {"seconds": 0}, done)
    finished = await task_ids(embedded)
    mine, other = await initialize(http_session, embedded.url), await initialize(http_session, embedded.url)
    opened = [await open_call(http_session, embedded.url, 1, "sleeper", {"seconds": 30}, mine)]
    try:
        my_task = await wait_for_hidden_task(embedded, not_in=finished)
        opened.append(await open_call(http_session, embedded.url, 1, "sleeper", {"seconds": 30}, other))
        other_task = await wait_for_hidden_task(embedded, not_in=finished | {my_task})
        await cancel_notification(http_session, embedded.url, 1, mine)
        _, queue, pump = opened[0]
        await asyncio.wait_for(pump, 10)  # the stream ended
        assert queue.empty(), "no response to a cancelled request"
        assert (await embedded.store.get(my_task)).status is TaskStatus.CANCELLED
        assert (await embedded.store.get(other_task)).status is TaskStatus.WORKING, "the other session's call runs on"
    finally:
        for response, _, pump in opened:
            pump.cancel()
            response.close()
    await wait_for_status(embedded, other_task, TaskStatus.CANCELLED)  # its client went away


async def test_without_a_session_a_cancel_reaches_the_one_open_call_with_its_id(
    embedded: Embedded, http_session: aiohttp.ClientSession
) -> None:
    """A client that does not echo `Mcp-Session-Id`: a call with the same id that finished within the
    minute does not make the cancel ambiguous; the open call (followed by this replica) is stopped."""
    await call_to_the_end(http_session, embedded.url, 1, "sleeper", {"seconds": 0}, {})
    finished = await task_ids(embedded)
    response, queue, pump = await open_call(http_session, embedded.url, 1, "sleeper", {"seconds": 30})
    try:
        task_id = await wait_for_hidden_task(embedded, not_in=finished)
        await cancel_notification(http_session, embedded.url, 1)
        await asyncio.wait_for(pump, 10)
        assert queue.empty(), "no response to a cancelled request"
        assert (await embedded.store.get(task_id)).status is TaskStatus.CANCELLED
    finally:
        pump.cancel()
        response.close()


async def test_a_session_id_the_gateway_did_not_issue_gets_404_and_initialize_starts_over(
    embedded: Embedded, http_session: aiohttp.ClientSession
) -> None:
    """2025-11-25 `transports.mdx` §Session Management: a request with a session id the server does not
    know gets 404, and the client initializes again. No session is stored: an id whose signature does
    not verify (forged, altered, or signed with another key) is the unknown one."""
    good = (await initialize(http_session, embedded.url))[SESSION]
    nonce, signature = good.split(".")
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
    for bad in (f"{nonce}.{'0' * 32}", f"{'0' * 32}.{signature}", "not-ours", good.upper()):
        status, _, [reply] = await legacy_post(
            http_session, embedded.url, {"jsonrpc": "2.0", "id": 4, "method": "tools/list"}, {SESSION: bad}
        )
        assert (status, reply["error"]["code"], reply["id"]) == (404, InvalidRequest.code, 4), bad
        status, _, _ = await legacy_post(http_session, embedded.url, cancel, {SESSION: bad})
        assert status == 404
        reply_to_us = {"jsonrpc": "2.0", "id": f"{legacy_calls.INPUT_REPLY_PREFIX}x.y.z", "result": {}}
        status, _, _ = await legacy_post(http_session, embedded.url, reply_to_us, {SESSION: bad})
        assert status == 404
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": LEGACY}}
    status, headers, [reply] = await legacy_post(http_session, embedded.url, init, {SESSION: "not-ours"})
    assert status == 200 and headers[SESSION] not in ("not-ours", good), "a new session"
    status, _, [reply] = await legacy_post(
        http_session, embedded.url, {"jsonrpc": "2.0", "id": 5, "method": "tools/list"}, {SESSION: good}
    )
    assert status == 200 and reply["result"]["tools"], "any session it issued stays valid: nothing expires"
