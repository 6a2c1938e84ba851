"""The audit trail and the refusal counter (issue 22 §6), with the static token file as the mechanism."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path

import aiohttp
import pytest
from prometheus_client import REGISTRY

from mcp_tasks.cli.settings import validate
from mcp_tasks.gateway import dispatch
from mcp_tasks.gateway.context import Era
from tests.conftest import Embedded, McpHttp, server_settings, serving, with_tokens


def refusals(reason: str) -> float:
    return REGISTRY.get_sample_value("mcptasks_auth_refusals_total", {"reason": reason}) or 0.0


async def test_each_task_request_writes_one_audit_line_without_tokens_or_arguments(
    secured: Embedded, http_session: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    """Our choice (issue 22 §6): time, principal, issuer, method, tool, task id, outcome; never a secret."""
    alice = McpHttp(http_session, secured.url, token="alice-token")
    caplog.set_level(logging.INFO, logger="mcp_tasks.audit")
    task_id = await alice.start_task("confirm_delete", {"filename": "very-secret-name.txt"})
    await alice.get(task_id)
    await alice.get("0" * 32)
    await alice.request("tools/list")  # not a task or tool call: no audit line
    await alice.cancel(task_id)
    lines = [record for record in caplog.records if record.name == "mcp_tasks.audit"]
    assert [(r.method, getattr(r, "tool", None), r.taskId, r.outcome) for r in lines] == [  # type: ignore[attr-defined]
        ("tools/call", "confirm_delete", task_id, "ok"),
        ("tasks/get", None, task_id, "ok"),
        ("tasks/get", None, "0" * 32, "-32602"),
        ("tasks/cancel", None, task_id, "ok"),
    ]
    for record in lines:
        assert (record.tenant, record.subject, record.mechanism) == ("acme", "alice", "static")  # type: ignore[attr-defined]
        text = record.getMessage() + repr(record.__dict__)
        assert "alice-token" not in text and "very-secret-name" not in text


async def test_refused_requests_are_counted_by_reason_and_not_audited(
    secured: Embedded, http_session: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mcp_tasks.audit")
    missing, invalid = refusals("missing_token"), refusals("invalid_token")
    assert (await McpHttp(http_session, secured.url).request("tools/call", {"name": "greet"})).status == 401
    assert (await McpHttp(http_session, secured.url, token="nope").request("tools/call", {"name": "x"})).status == 401
    assert (refusals("missing_token"), refusals("invalid_token")) == (missing + 1, invalid + 1)
    assert not [record for record in caplog.records if record.name == "mcp_tasks.audit"]


async def test_a_legacy_era_call_is_audited_with_its_tool_from_the_body(
    secured: Embedded, http_session: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    """A 2025-11-25 client sends no `Mcp-Name`; the audit line takes the tool from the parsed body."""
    alice = McpHttp(http_session, secured.url, token="alice-token")
    caplog.set_level(logging.INFO, logger="mcp_tasks.audit")
    legacy = {"MCP-Protocol-Version": "2025-11-25", "Mcp-Method": None, "Mcp-Name": None}
    reply = await alice.request(
        "tools/call", {"name": "greet", "arguments": {"name": "Ada"}}, with_meta=False, headers=legacy
    )
    assert reply.status == 200, reply.body
    lines = [record for record in caplog.records if record.name == "mcp_tasks.audit"]
    assert [(r.method, r.tool, r.outcome) for r in lines] == [("tools/call", "greet", "ok")]  # type: ignore[attr-defined]


async def test_an_issuer_limited_to_some_tenants_is_refused_403_for_another_with_an_audit_line(
    tmp_path: Path, http_session: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 30 §1: `MCPTASKS_ISSUER_TENANTS` limits which tenants an issuer may vouch for. eve's token names
    tenant `evil`, which `static` may not vouch for here: 403 naming the rule, counted, audited with the
    verified principal; acme's principals are served as before."""
    settings = with_tokens(server_settings(tmp_path / "data"), tmp_path)
    settings = validate(replace(settings, auth=replace(settings.auth, issuer_tenants=("static=acme", "static=ops-*"))))
    caplog.set_level(logging.INFO)
    before = refusals("tenant_not_allowed")
    async with serving(settings) as server:
        eve = McpHttp(http_session, server.url, token="eve-token")
        refused = await eve.request("tools/call", {"name": "greet", "arguments": {"name": "Ada"}})
        assert refused.status == 403, refused.body
        message = refused.body["error"]["message"]
        assert "static may not vouch for tenant 'evil'" in message and "acme, ops-*" in message
        assert "eve-token" not in message
        assert (await eve.get("0" * 32)).status == 403
        alice = McpHttp(http_session, server.url, token="alice-token")
        assert (await alice.call_tool("greet", {"name": "Ada"})).status == 200
    assert refusals("tenant_not_allowed") == before + 2
    audited = [record for record in caplog.records if record.name == "mcp_tasks.audit"]
    keys = ("tenant", "subject", "issuer", "method", "tool", "taskId", "outcome")
    assert [tuple(r.__dict__.get(key) for key in keys) for r in audited] == [
        ("evil", "alice", "static", "tools/call", "greet", None, "tenant_not_allowed"),
        ("evil", "alice", "static", "tasks/get", None, "0" * 32, "tenant_not_allowed"),
        ("acme", "alice", "static", "tools/call", "greet", None, "ok"),
    ]
    logged = [r.getMessage() for r in caplog.records if r.name == "mcp_tasks.gateway.identity"]
    assert any("tenant_not_allowed" in line and "'static'" in line and "'alice'" in line for line in logged), logged


async def test_every_route_refuses_a_request_without_a_caller_in_both_eras(
    secured: Embedded, http_session: aiohttp.ClientSession
) -> None:
    """Issue 30 §2, fail closed: every row of the method table in each era it serves (requests and
    notifications), the removed methods, and a legacy client's reply to one of our input requests, with
    no token and with a token nobody issued, are 401 before any handler runs: no task is created, nothing is
    listed or cancelled."""
    params = {"name": "greet", "arguments": {"name": "Ada"}, "taskId": "0" * 32, "inputResponses": {}}
    legacy = {"MCP-Protocol-Version": "2025-11-25", "Mcp-Method": None, "Mcp-Name": None}
    removed = [(method, era) for method in ("tasks/result", "tasks/list") for era in Era]
    walked = [(row.method, era, row.notification) for row in dispatch.ROUTES for era in sorted(row.eras)]
    assert {(method, era) for method, era, _ in walked} >= {(method, Era.LEGACY) for method in ("initialize", "ping")}
    before = await secured.store.unfinished()
    for token in (None, "nobody-issued-this"):
        anonymous = McpHttp(http_session, secured.url, token=token)
        for method, era, is_notification in [*walked, *((method, era, False) for method, era in removed)]:
            modern = era is Era.MODERN
            body, headers = anonymous.prepare(method, params, with_meta=modern, headers=None if modern else legacy)
            if is_notification:
                body = json.dumps({key: value for key, value in json.loads(body).items() if key != "id"})
            reply = await anonymous.post(body, headers)
            assert reply.status == 401, (method, era, reply.status, reply.body)
            assert "result" not in reply.body
        body, headers = anonymous.prepare("tools/call", with_meta=False, headers=legacy)
        reply_to_input = {"jsonrpc": "2.0", "id": f"mcptasks-input.{'0' * 32}.aw.{'0' * 32}", "result": {}}
        assert (await anonymous.post(json.dumps(reply_to_input), headers)).status == 401
    assert await secured.store.unfinished() == before
