"""The Streamable HTTP wire, raw: every error code, its HTTP status, and the request validation order.

Required by MCP 2026-07-28 (`streamable-http.mdx`, `basic/index.mdx`) and SEP-2663 unless a docstring
says it is our own choice.
"""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
from mcp_types import jsonrpc

from mcp_tasks.protocol import constants
from tests.conftest import PLAIN_CAPS, McpHttp, server_settings, start_embedded

BASE_HEADERS = {
    "Content-Type": "application/json",
    constants.HEADER_PROTOCOL_VERSION: constants.PROTOCOL_VERSION,
}


async def test_body_that_is_not_json_is_a_parse_error(mcp: McpHttp) -> None:
    reply = await mcp.post(b"{not json", {**BASE_HEADERS, constants.HEADER_METHOD: "tools/list"})
    assert reply.status == 400
    assert reply.error["code"] == jsonrpc.PARSE_ERROR
    assert reply.body["id"] is None


async def test_batch_is_an_invalid_request_not_a_crash(mcp: McpHttp) -> None:
    body = json.dumps([{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}])
    reply = await mcp.post(body, {**BASE_HEADERS, constants.HEADER_METHOD: "tools/list"})
    assert reply.status == 400
    assert reply.error["code"] == jsonrpc.INVALID_REQUEST
    assert "batch" in reply.error["message"]


async def test_invalid_envelopes_are_invalid_requests_that_echo_the_id(mcp: McpHttp) -> None:
    for body in (
        {"jsonrpc": "1.0", "id": 7, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 7, "method": 12},
        {"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": "by-name"},
        {"jsonrpc": "2.0", "id": 7, "result": {}},
        "just a string",
    ):
        reply = await mcp.post(json.dumps(body), {**BASE_HEADERS, constants.HEADER_METHOD: "tools/list"})
        assert reply.status == 400, body
        assert reply.error["code"] == jsonrpc.INVALID_REQUEST, body
        assert reply.body["id"] == (7 if isinstance(body, dict) else None)


async def test_missing_meta_or_its_required_keys_is_invalid_params_with_400(mcp: McpHttp) -> None:
    reply = await mcp.request("server/discover", with_meta=False)
    assert (reply.status, reply.error["code"]) == (400, jsonrpc.INVALID_PARAMS)
    meta_without_caps = {constants.META_PROTOCOL_VERSION: constants.PROTOCOL_VERSION}
    reply = await mcp.request("server/discover", {"_meta": meta_without_caps}, with_meta=False)
    assert (reply.status, reply.error["code"]) == (400, jsonrpc.INVALID_PARAMS)


async def test_client_info_is_optional(mcp: McpHttp) -> None:
    meta = {constants.META_PROTOCOL_VERSION: constants.PROTOCOL_VERSION, constants.META_CLIENT_CAPABILITIES: {}}
    reply = await mcp.request("server/discover", {"_meta": meta}, with_meta=False)
    assert reply.status == 200
    assert reply.result["supportedVersions"] == [constants.PROTOCOL_VERSION, *constants.LEGACY_PROTOCOL_VERSIONS]


async def test_header_mismatches_are_32020(mcp: McpHttp) -> None:
    cases: list[tuple[str, dict[str, Any] | None, dict[str, str | None]]] = [
        ("tools/list", None, {constants.HEADER_METHOD: "prompts/list"}),
        ("tools/list", None, {constants.HEADER_METHOD: None}),
        ("tools/list", None, {constants.HEADER_METHOD: "TOOLS/LIST"}),
        ("tools/list", None, {constants.HEADER_PROTOCOL_VERSION: None}),
        ("tools/list", None, {constants.HEADER_PROTOCOL_VERSION: "2025-11-25"}),
        ("tools/call", {"name": "greet", "arguments": {"name": "a"}}, {constants.HEADER_NAME: "other_tool"}),
        ("tools/call", {"name": "greet", "arguments": {"name": "a"}}, {constants.HEADER_NAME: None}),
        ("tools/call", {"name": "greet", "arguments": {"name": "a"}}, {constants.HEADER_NAME: "=?base64?Z3JlZXQ?="}),
        ("tasks/get", {"taskId": "abc"}, {constants.HEADER_NAME: "not-abc"}),
        ("tasks/get", {"taskId": "abc"}, {constants.HEADER_NAME: None}),
    ]
    for method, params, headers in cases:
        reply = await mcp.request(method, params, headers=headers)
        assert reply.status == 400, (method, headers)
        assert reply.error["code"] == jsonrpc.HEADER_MISMATCH, (method, headers, reply.body)
        assert reply.headers["Content-Type"].startswith("application/json")
    missing = await mcp.request("tasks/get", {"taskId": "abc"}, headers={constants.HEADER_NAME: None})
    assert "Mcp-Name header is missing" in missing.error["message"]
    assert "send `Mcp-Name: abc`" in missing.error["message"], "the message says exactly which header to add"


async def test_header_values_are_trimmed_case_insensitive_and_base64_decoded(mcp: McpHttp) -> None:
    reply = await mcp.call_tool("greet", {"name": "b"}, headers={"mcp-name": "=?base64?Z3JlZXQ=?="})
    assert reply.result["content"][0]["text"] == "Hello, b!"
    reply = await mcp.call_tool("greet", {"name": "b"}, headers={constants.HEADER_NAME: "  greet  "})
    assert reply.status == 200


async def test_unsupported_version_is_32022_with_supported_and_requested(mcp: McpHttp) -> None:
    meta = {constants.META_PROTOCOL_VERSION: "v999.0.0", constants.META_CLIENT_CAPABILITIES: {}}
    reply = await mcp.request(
        "server/discover", {"_meta": meta}, with_meta=False, headers={constants.HEADER_PROTOCOL_VERSION: "v999.0.0"}
    )
    assert reply.status == 400
    assert reply.error["code"] == jsonrpc.UNSUPPORTED_PROTOCOL_VERSION
    assert reply.error["data"] == {"supported": list(constants.SUPPORTED_PROTOCOL_VERSIONS), "requested": "v999.0.0"}


async def test_removed_and_unknown_methods_are_32601_with_404(mcp: McpHttp) -> None:
    """`tasks/result` and `tasks/list` are not our API (SEP-2663 §Backward Compatibility); neither is the handshake."""
    removed: list[tuple[str, dict[str, Any]]] = [
        ("tasks/result", {"taskId": "x"}),
        ("tasks/list", {}),
        ("initialize", {}),
        ("ping", {}),
        ("logging/setLevel", {"level": "info"}),
        ("resources/subscribe", {"uri": "x"}),
        ("unknown/method", {}),
    ]
    for method, params in removed:
        reply = await mcp.request(method, params)
        assert reply.status == 404, method
        assert reply.error["code"] == jsonrpc.METHOD_NOT_FOUND, method


async def test_task_methods_without_the_extension_are_32021_before_any_lookup(mcp: McpHttp) -> None:
    """SEP-2663 Error Handling: the gate runs before the lookup, so an unknown id still gets -32021."""
    gated: list[tuple[str, dict[str, Any]]] = [
        ("tasks/get", {"taskId": "gate-test"}),
        ("tasks/update", {"taskId": "gate-test", "inputResponses": {}}),
        ("tasks/cancel", {"taskId": "gate-test"}),
    ]
    for method, params in gated:
        reply = await mcp.request(method, params, caps=PLAIN_CAPS)
        assert reply.status == 400
        assert reply.error["code"] == jsonrpc.MISSING_REQUIRED_CLIENT_CAPABILITY
        assert reply.error["data"] == {"requiredCapabilities": {"extensions": {constants.TASKS_EXTENSION: {}}}}


async def test_required_task_tool_without_the_extension_is_32021(mcp: McpHttp) -> None:
    reply = await mcp.call_tool("failing_job", {}, caps=PLAIN_CAPS)
    assert reply.status == 400
    assert reply.error["data"]["requiredCapabilities"]["extensions"] == {constants.TASKS_EXTENSION: {}}


async def test_a_tool_needing_an_undeclared_client_capability_is_32021(mcp: McpHttp) -> None:
    reply = await mcp.call_tool("test_missing_capability", {}, caps=PLAIN_CAPS)
    assert reply.error == {
        "code": jsonrpc.MISSING_REQUIRED_CLIENT_CAPABILITY,
        "message": reply.error["message"],
        "data": {"requiredCapabilities": {"sampling": {}}},
    }


async def test_unknown_task_is_32602(mcp: McpHttp) -> None:
    for reply in (await mcp.get("nope"), await mcp.update("nope", {}), await mcp.cancel("nope")):
        assert reply.error["code"] == jsonrpc.INVALID_PARAMS
        assert reply.error["message"] == "Failed to retrieve task: Task not found"


async def test_unknown_tool_and_bad_params_are_32602(mcp: McpHttp) -> None:
    assert (await mcp.call_tool("no_such_tool", {})).error["code"] == jsonrpc.INVALID_PARAMS
    assert (await mcp.call_tool("greet", ["not", "an", "object"])).error["code"] == jsonrpc.INVALID_PARAMS  # type: ignore[arg-type]
    assert (await mcp.request("tasks/get", {"taskId": 5})).error["code"] in {
        jsonrpc.INVALID_PARAMS,
        jsonrpc.HEADER_MISMATCH,
    }
    assert (await mcp.request("tools/list", {"cursor": "!!garbage"})).error["code"] == jsonrpc.INVALID_PARAMS


async def test_invalid_arguments_are_a_tool_error_not_a_protocol_error_and_create_no_task(mcp: McpHttp) -> None:
    """SEP-1303: schema violations come back as `isError: true` so the model can correct itself."""
    reply = await mcp.call_tool("slow_compute", {"seconds": "soon"})
    assert reply.result["isError"] is True
    assert "seconds" in reply.result["content"][0]["text"]
    assert "taskId" not in reply.result


async def test_every_result_carries_result_type_and_server_info(mcp: McpHttp) -> None:
    for reply in (
        await mcp.request("server/discover"),
        await mcp.request("tools/list"),
        await mcp.call_tool("greet", {"name": "x"}),
    ):
        assert reply.result["resultType"] == "complete"
        assert reply.result["_meta"][constants.META_SERVER_INFO]["name"] == "mcp-tasks"
    listed = (await mcp.request("tools/list")).result
    assert listed["cacheScope"] == "public" and isinstance(listed["ttlMs"], int)
    assert all(tool["inputSchema"]["type"] == "object" and tool["description"] for tool in listed["tools"])
    assert all("execution" not in tool for tool in listed["tools"])


async def test_notification_posts_get_202_without_a_body(mcp: McpHttp) -> None:
    body = json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}})
    reply = await mcp.post(body, {**BASE_HEADERS, constants.HEADER_METHOD: "notifications/cancelled"})
    assert reply.status == 202
    assert reply.body == ""


async def test_get_and_delete_are_405(mcp: McpHttp) -> None:
    for method in ("GET", "DELETE"):
        async with mcp.session.request(method, mcp.url) as response:
            assert response.status == 405


async def test_session_and_resumption_headers_and_the_legacy_task_param_are_ignored(mcp: McpHttp) -> None:
    reply = await mcp.call_tool(
        "greet",
        {"name": "legacy"},
        extra={"task": {"ttl": 60000, "pollInterval": 100}},
        headers={"Mcp-Session-Id": "abc", "Last-Event-ID": "42"},
    )
    assert reply.result["content"][0]["text"] == "Hello, legacy!"
    assert "taskId" not in reply.result
    assert "Mcp-Session-Id" not in reply.headers


async def test_bad_origin_and_rebinding_host_are_403(mcp: McpHttp) -> None:
    reply = await mcp.request("server/discover", headers={"Origin": "http://evil.example.com"})
    assert reply.status == 403
    reply = await mcp.request("server/discover", headers={"Host": "evil.example.com"})
    assert reply.status == 403
    reply = await mcp.request("server/discover", headers={"Origin": "http://localhost:3000"})
    assert reply.status == 200


async def test_oversized_body_is_413_with_a_json_rpc_error(mcp: McpHttp) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"pad": "x" * 2_000_000}})
    reply = await mcp.post(io.BytesIO(body.encode()), {**BASE_HEADERS, constants.HEADER_METHOD: "tools/list"})
    assert reply.status == 413
    assert reply.error["code"] == jsonrpc.INVALID_REQUEST


async def test_tools_list_pages_with_an_opaque_cursor(tmp_path: Path, http_session: aiohttp.ClientSession) -> None:
    """MCP 2026-07-28 pagination: `nextCursor` until the last page; all pages share one order."""
    settings = server_settings(tmp_path)
    settings = replace(settings, gateway=replace(settings.gateway, list_page_size=4))
    server, web_runner = await start_embedded(settings)
    try:
        client = McpHttp(http_session, server.url)
        names: list[str] = []
        cursor: str | None = None
        while True:
            page = (await client.request("tools/list", {"cursor": cursor} if cursor else {})).result
            assert len(page["tools"]) <= 4
            names += [tool["name"] for tool in page["tools"]]
            cursor = page.get("nextCursor")
            if cursor is None:
                break
        assert names == [spec.name for spec in server.services.catalog.list_tools()]
        assert len(names) > 8
    finally:
        await web_runner.cleanup()


async def test_a_missing_mcp_name_on_tasks_methods_can_be_accepted_but_a_different_one_never(
    tmp_path: Path, http_session: aiohttp.ClientSession
) -> None:
    """`accept_missing_name_header` (off by default) is for clients that omit `Mcp-Name` on `tasks/*`
    (fastmcp-tasks 4.1); a header that disagrees with the body is still -32020, and other methods keep
    requiring it."""
    base = server_settings(tmp_path)
    settings = replace(base, gateway=replace(base.gateway, accept_missing_name_header=True))
    server, web_runner = await start_embedded(settings)
    try:
        mcp = McpHttp(http_session, server.url)
        task_id = await mcp.start_task("sleeper", {"seconds": 0.1})
        reply = await mcp.get(task_id, headers={constants.HEADER_NAME: None})
        assert reply.status == 200 and reply.result["taskId"] == task_id
        reply = await mcp.get(task_id, headers={constants.HEADER_NAME: "f" * 32})
        assert reply.error["code"] == jsonrpc.HEADER_MISMATCH
        reply = await mcp.call_tool("greet", {"name": "a"}, headers={constants.HEADER_NAME: None})
        assert reply.error["code"] == jsonrpc.HEADER_MISMATCH
    finally:
        await web_runner.cleanup()
