"""Every defect a client can send gets a documented 4xx and, where an id could be read, a JSON-RPC error.

Our choice, from the crash-only review: nothing a client sends may answer 5xx or plain text. Each test
here is one defect class found by fault injection against the embedded server, on a real socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import io
import json
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from mcp_types import jsonrpc

from mcp_tasks.protocol import constants
from mcp_tasks.protocol.jsonrpc import MAX_DEPTH
from tests.conftest import Embedded, McpHttp, server_settings, serving, start_embedded, with_tokens

HEADERS = {
    "Content-Type": "application/json",
    constants.HEADER_PROTOCOL_VERSION: constants.PROTOCOL_VERSION,
    constants.HEADER_METHOD: "tools/list",
}
CALL_HEADERS = {**HEADERS, constants.HEADER_METHOD: "tools/call", constants.HEADER_NAME: "sleeper"}


def body_of(mcp: McpHttp, method: str = "tools/list", params: dict[str, Any] | None = None, **extra: Any) -> str:
    return json.dumps(
        {"jsonrpc": "2.0", "id": 7, "method": method, "params": {**(params or {}), "_meta": mcp.envelope({})}, **extra}
    )


async def test_an_origin_that_is_not_a_url_is_403_json_not_a_crash(mcp: McpHttp) -> None:
    for origin in ("http://[", "http://[::1", "://", "http://a:b:c", "http://[zz]:1", "null"):
        reply = await mcp.post(body_of(mcp), {**HEADERS, "Origin": origin})
        assert reply.status == 403, (origin, reply.status, reply.body)
        assert reply.error["code"] == jsonrpc.INVALID_REQUEST


async def test_raw_surrogate_bytes_are_a_parse_error_everywhere(mcp: McpHttp) -> None:
    """RFC 8259 §8.1: JSON text exchanged between systems is UTF-8; `ED A0 80` is not UTF-8 (RFC 3629)."""
    surrogate = b"\xed\xa0\x80"
    in_id = b'{"jsonrpc":"2.0","id":"a' + surrogate + b'","method":"tools/list","params":{}}'
    reply = await mcp.post(in_id, HEADERS)
    assert (reply.status, reply.error["code"]) == (400, jsonrpc.PARSE_ERROR)
    in_args = body_of(mcp, "tools/call", {"name": "sleeper", "arguments": {"x": "SURROGATE"}}).encode()
    reply = await mcp.post(in_args.replace(b"SURROGATE", surrogate), CALL_HEADERS)
    assert (reply.status, reply.error["code"]) == (400, jsonrpc.PARSE_ERROR)
    assert "UTF-8" in reply.error["message"]


async def test_a_lone_surrogate_escape_is_invalid_params_naming_the_field(mcp: McpHttp) -> None:
    """`"\\ud800"` is valid JSON syntax (RFC 8259 §7) but no Unicode string: -32602 naming where it is."""
    body = body_of(mcp, "tools/call", {"name": "sleeper", "arguments": {"x": ["ok", "a\ud800b"]}})
    reply = await mcp.post(body, CALL_HEADERS)
    assert (reply.status, reply.error["code"]) == (400, jsonrpc.INVALID_PARAMS)
    assert "params.arguments.x[1]" in reply.error["message"]
    in_id = body_of(mcp).replace('"id": 7', '"id": "\\udc00"')
    reply = await mcp.post(in_id, HEADERS)
    assert reply.status == 400 and reply.body["id"] is None
    assert reply.error["code"] == jsonrpc.INVALID_REQUEST


async def test_params_that_are_an_array_are_invalid_params_not_an_invalid_request(mcp: McpHttp) -> None:
    """JSON-RPC 2.0 §4.2 allows by-position params; MCP methods take an object, so -32602 (not -32600)."""
    body = json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": []})
    reply = await mcp.post(body, HEADERS)
    assert (reply.status, reply.body["id"], reply.error["code"]) == (400, 3, jsonrpc.INVALID_PARAMS)
    for params in ('"x"', "1", "true"):
        reply = await mcp.post(f'{{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{params}}}', HEADERS)
        assert (reply.status, reply.error["code"]) == (400, jsonrpc.INVALID_REQUEST), params


async def test_a_body_that_is_not_what_its_content_encoding_says_is_400_json(mcp: McpHttp) -> None:
    body = body_of(mcp).encode()
    reply = await mcp.post(b"definitely not gzip", {**HEADERS, "Content-Encoding": "gzip"})
    assert (reply.status, reply.error["code"]) == (400, jsonrpc.PARSE_ERROR)
    assert "Content-Encoding" in reply.error["message"]
    truncated = gzip.compress(body)[:-12]
    reply = await mcp.post(truncated, {**HEADERS, "Content-Encoding": "gzip"})
    assert reply.status == 400 and "error" in reply.body
    reply = await mcp.post(body, {**HEADERS, "Content-Encoding": "br;q=1, zstd"})
    assert reply.status in (400, 415) and "error" in reply.body
    ok = await mcp.post(gzip.compress(body), {**HEADERS, "Content-Encoding": "gzip"})
    assert ok.status == 200 and "tools" in ok.result


async def test_a_gzip_bomb_is_413_not_a_memory_spike(mcp: McpHttp, embedded: Embedded) -> None:
    limit = embedded.services.settings.max_body_bytes
    bomb = gzip.compress(b" " * (limit * 4))
    reply = await mcp.post(bomb, {**HEADERS, "Content-Encoding": "gzip"})
    assert reply.status == 413 and reply.error["code"] == jsonrpc.INVALID_REQUEST


async def test_a_pre_creation_answer_of_the_wrong_shape_is_invalid_params(mcp: McpHttp) -> None:
    first = await mcp.call_tool("confirmed", {})
    state = first.result["requestState"]
    for action in ([1], {"a": 1}, 3, None, True):
        answer = {"confirm": {"action": action}}
        reply = await mcp.call_tool("confirmed", {}, extra={"inputResponses": answer, "requestState": state})
        assert reply.status == 400 and reply.error["code"] == jsonrpc.INVALID_PARAMS, (action, reply.body)
        assert "confirm" in reply.error["message"]


async def test_a_record_over_the_store_limit_is_invalid_params_naming_the_limit(mcp: McpHttp) -> None:
    """Arguments and an answer that fit the body limit each, but not one stored record together."""
    task_id = await mcp.start_task("asker", {"pad": "p" * 900_000})
    await mcp.wait_status(task_id, "input_required")
    pending = (await mcp.get(task_id)).result["inputRequests"]
    key = next(iter(pending))
    answer = {"action": "accept", "content": {"answer": "a" * 900_000}}
    reply = await mcp.update(task_id, {key: answer})
    assert reply.status == 400 and reply.error["code"] == jsonrpc.INVALID_PARAMS, reply.body
    assert "too large" in reply.error["message"] and "bytes" in reply.error["message"]
    assert key in (await mcp.get(task_id)).result["inputRequests"], "a refused answer leaves the request pending"
    await mcp.cancel(task_id)


async def status_after_half_a_body(server: Embedded, declared_bytes: int, timeout_s: float) -> bytes:
    """Send a request head declaring `declared_bytes` of body, then one byte; return the status line."""
    host, port = server.url.removeprefix("http://").split("/")[0].split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    head = "".join(f"{k}: {v}\r\n" for k, v in HEADERS.items())
    writer.write(f"POST /mcp HTTP/1.1\r\nHost: {host}\r\n{head}Content-Length: {declared_bytes}\r\n\r\n{{".encode())
    await writer.drain()
    try:
        async with asyncio.timeout(timeout_s):
            return await reader.readline()
    finally:
        writer.close()
        await writer.wait_closed()


def tokened_server(tmp_path: Path) -> contextlib.AbstractAsyncContextManager[Embedded]:
    """An embedded server that requires a bearer token (`alice-token` and the others of `TOKENS`)."""
    return serving(with_tokens(server_settings(tmp_path / "data"), tmp_path))


async def test_a_half_sent_body_is_cut_off_after_the_read_timeout(embedded: Embedded) -> None:
    timeout_s = embedded.services.settings.body_read_timeout_s + 5
    assert b" 408 " in await status_after_half_a_body(embedded, 1000, timeout_s)


async def test_an_unauthenticated_request_is_refused_before_its_body_is_read(tmp_path: Path) -> None:
    async with tokened_server(tmp_path) as server:
        assert b" 401 " in await status_after_half_a_body(server, 100_000, 5)


async def raw_exchange(embedded: Embedded, request: bytes) -> bytes:
    """Send raw bytes to the server and return its whole answer (the server closes the connection)."""
    host, port = embedded.url.removeprefix("http://").split("/")[0].split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(request)
    await writer.drain()
    try:
        async with asyncio.timeout(5):
            return await reader.read()
    finally:
        writer.close()
        await writer.wait_closed()


async def test_an_authorization_header_that_is_not_utf8_is_401_not_a_crash(tmp_path: Path) -> None:
    async with tokened_server(tmp_path) as server:
        answer = await raw_exchange(
            server,
            b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \xff\xfe\r\n"
            b"Content-Length: 2\r\nConnection: close\r\n\r\n{}",
        )
        assert answer.startswith(b"HTTP/1.1 401 ") and b"application/json" in answer


async def test_nesting_deeper_than_the_limit_is_a_parse_error_at_the_door(mcp: McpHttp) -> None:
    """One depth limit at decode time, so no later step (schema, store encoder) runs out of stack."""
    task_id = await mcp.start_task("confirm_delete", {"filename": "f"})
    await mcp.wait_status(task_id, "input_required")
    for depth in (MAX_DEPTH + 1, 500):  # just past the limit, and far past it
        deep: Any = {}
        for _ in range(depth):
            deep = {"a": deep}
        answer = {"action": "accept", "content": {"confirm": True}, "_meta": deep}
        reply = await mcp.update(task_id, {"confirm": answer})
        assert (reply.status, reply.error["code"]) == (400, jsonrpc.PARSE_ERROR), (depth, reply.body)
        assert str(MAX_DEPTH) in reply.error["message"]
    shallow = await mcp.update(task_id, {"confirm": {"action": "accept", "content": {"confirm": True}, "_meta": {}}})
    assert shallow.status == 200, shallow.body


async def test_bytes_after_the_end_of_a_gzip_stream_are_refused(mcp: McpHttp, embedded: Embedded) -> None:
    body = body_of(mcp).encode()
    junk = gzip.compress(body) + b"\x00" * 4096
    reply = await mcp.post(junk, {**HEADERS, "Content-Encoding": "gzip"})
    assert (reply.status, reply.error["code"]) == (400, jsonrpc.PARSE_ERROR)
    two_members = gzip.compress(body[:10]) + gzip.compress(body[10:])
    reply = await mcp.post(two_members, {**HEADERS, "Content-Encoding": "gzip"})
    assert reply.status == 400
    limit = embedded.services.settings.max_body_bytes
    padded = gzip.compress(body) + b"\x00" * limit
    reply = await mcp.post(
        io.BytesIO(padded), {**HEADERS, "Content-Encoding": "gzip", "Content-Length": str(len(padded))}
    )
    assert reply.status == 413, "a declared length over the limit is refused before reading"


async def test_host_names_are_case_insensitive(mcp: McpHttp) -> None:
    reply = await mcp.post(body_of(mcp), {**HEADERS, "Host": "LOCALHOST"})
    assert reply.status == 200, reply.body


async def test_malformed_http_is_answered_400_without_an_error_log(
    embedded: Embedded, caplog: pytest.LogCaptureFixture
) -> None:
    answer = await raw_exchange(embedded, b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header\r\n\r\n")
    assert answer.startswith((b"HTTP/1.1 400 ", b"HTTP/1.0 400 "))
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


async def test_the_artifact_stores_side_files_are_not_resources(mcp: McpHttp) -> None:
    task_id = await mcp.start_task("big_result", {"size": 400_000})
    done = await mcp.wait_status(task_id, "completed")
    link = next(block for block in done["result"]["content"] if block["type"] == "resource_link")
    assert (await mcp.request("resources/read", {"uri": link["uri"]})).status == 200
    side = await mcp.request("resources/read", {"uri": link["uri"] + ".mime"})
    assert side.status == 400 and side.error["code"] == jsonrpc.INVALID_PARAMS


async def test_idle_and_half_sent_heads_are_closed_but_streams_being_answered_are_not(
    tmp_path: Path, http_session: Any
) -> None:
    """A connection that never sends a whole request head is closed after `idle_timeout_s`; an SSE
    answer that lasts longer than that is not cut."""
    base = server_settings(tmp_path / "data")
    settings = replace(base, gateway=replace(base.gateway, idle_timeout_s=1.0))
    server, web_runner = await start_embedded(settings)
    try:
        for head in (b"", b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n"):
            answer = await raw_exchange(server, head)  # returns once the server closes the connection
            assert answer == b"", answer
        mcp = McpHttp(http_session, server.url)
        task_id = await mcp.start_task("slow_compute", {"seconds": 2.5, "label": "long"})
        reply = await mcp.request("subscriptions/listen", {"notifications": {"taskIds": [task_id]}})
        assert reply.status == 200 and '"status":"completed"' in reply.body.replace(" ", ""), reply.body
    finally:
        await web_runner.cleanup()
