"""Hostile and unlucky input: split bodies, deep nesting, bad Unicode, malformed answers, broken tools."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import pytest
from mcp_types import jsonrpc

from mcp_tasks.cli.serve import build_app
from mcp_tasks.cli.settings import SettingsError
from mcp_tasks.protocol import constants
from tests.conftest import PLAIN_CAPS, Embedded, McpHttp, server_settings, until

HEADERS = {
    "Content-Type": "application/json",
    constants.HEADER_PROTOCOL_VERSION: constants.PROTOCOL_VERSION,
    constants.HEADER_METHOD: "tools/list",
}


def tools_list_body(mcp: McpHttp, padding: int = 0) -> bytes:
    params = {"_meta": mcp.envelope({}), "pad": "x" * padding}
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": params}).encode()


async def test_a_body_sent_in_pieces_is_read_whole(embedded: Embedded, mcp: McpHttp) -> None:
    body = tools_list_body(mcp)
    host, port = embedded.url.removeprefix("http://").split("/")[0].split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    head = "".join(f"{k}: {v}\r\n" for k, v in HEADERS.items())
    writer.write(f"POST /mcp HTTP/1.1\r\nHost: {host}\r\n{head}Content-Length: {len(body)}\r\n\r\n".encode())
    writer.write(body[:40])
    await writer.drain()
    # Stays: the gap between the pieces is what is under test (the server reads the first alone, then waits);
    # nothing tells the client that the server has read it.
    await asyncio.sleep(0.2)
    writer.write(body[40:])
    await writer.drain()
    status_line = await reader.readline()
    writer.close()
    await writer.wait_closed()
    assert b" 200 " in status_line


async def test_a_large_valid_body_under_the_limit_is_accepted(mcp: McpHttp) -> None:
    reply = await mcp.post(tools_list_body(mcp, padding=600_000), HEADERS)
    assert reply.status == 200 and "tools" in reply.result


async def test_deeply_nested_json_is_a_parse_error_not_a_crash(mcp: McpHttp) -> None:
    for depth in (100_000, 5_000):
        reply = await mcp.post("[" * depth + "]" * depth, HEADERS)
        assert (reply.status, reply.error["code"]) == (400, jsonrpc.PARSE_ERROR)


async def test_non_finite_numbers_are_not_json(mcp: McpHttp) -> None:
    """RFC 8259 has no NaN/Infinity, and 1e400 overflows every 64-bit float: a parse error, not a silent inf."""
    headers = {**HEADERS, constants.HEADER_METHOD: "tools/call", constants.HEADER_NAME: "sleeper"}
    for number in ("NaN", "Infinity", "-Infinity", "1e400"):
        body = (
            '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sleeper","arguments":{"seconds":'
            + number
            + "},"
            + json.dumps({"_meta": mcp.envelope({})})[1:-1]
            + "}}"
        )
        reply = await mcp.post(body, headers)
        assert (reply.status, reply.error["code"]) == (400, jsonrpc.PARSE_ERROR), number


async def test_a_malformed_answer_is_refused_and_the_request_stays_pending(mcp: McpHttp) -> None:
    task_id = await mcp.start_task("confirm_delete", {"filename": "f"})
    await mcp.wait_status(task_id, "input_required")
    for garbage in ("yes", 42, None, [1], {}, {"action": "maybe"}):
        reply = await mcp.update(task_id, {"confirm": garbage})
        assert reply.error["code"] == jsonrpc.INVALID_PARAMS, garbage
        assert "confirm" in reply.error["message"]
    assert list((await mcp.get(task_id)).result["inputRequests"]) == ["confirm"]
    await mcp.cancel(task_id)


async def test_a_tool_whose_command_is_missing_is_a_tool_error_or_a_failed_task(mcp: McpHttp) -> None:
    sync = await mcp.call_tool("missing_command", {}, caps=PLAIN_CAPS)
    assert sync.result["isError"] is True
    assert "Cannot start tool" in sync.result["content"][0]["text"]
    task_id = await mcp.start_task("missing_command")
    failed = await mcp.wait_status(task_id, "failed", "completed")
    assert failed["status"] == "failed" and "cannot start" in failed["statusMessage"]


async def test_cancel_is_prompt_even_when_a_detached_child_holds_the_tools_stderr(mcp: McpHttp) -> None:
    task_id = await mcp.start_task("forker")
    running = await mcp.wait_task(task_id, lambda t: str(t.get("statusMessage", "")).startswith("child "))
    child = int(running["statusMessage"].split()[1])
    try:
        await mcp.cancel(task_id)
        assert (await mcp.wait_status(task_id, "cancelled", timeout_s=5))["status"] == "cancelled"
    finally:
        os.kill(child, signal.SIGKILL)


def test_a_malformed_or_repeating_token_file_is_a_clear_startup_error(tmp_path: Path) -> None:
    from dataclasses import replace

    for text in (
        "tokens: [{token: a, tenant: t}]",
        "tokens:\n - {token: a, tenant: t, subject: s}\n - {token: a, tenant: u, subject: v}",
        "{",
    ):
        tokens = tmp_path / "tokens.yaml"
        tokens.write_text(text)
        settings = server_settings(tmp_path / "data")
        with pytest.raises(SettingsError, match="tokens"):
            build_app(replace(settings, serve=replace(settings.serve, tokens_file=tokens)))


async def test_a_synchronous_call_whose_client_disconnects_stops_its_tool(mcp: McpHttp, embedded: Embedded) -> None:
    """Nobody will read the result: the tool process is stopped instead of running to its sync timeout."""
    call = asyncio.create_task(mcp.call_tool("sleeper", {"seconds": 30}, caps=PLAIN_CAPS))
    await until(lambda: embedded.runner.executions, timeout_s=5)  # the synchronous run started
    call.cancel()  # closes the connection mid-request
    await asyncio.gather(call, return_exceptions=True)
    await until(lambda: not embedded.runner.executions, timeout_s=5)  # the run was stopped when its client left
