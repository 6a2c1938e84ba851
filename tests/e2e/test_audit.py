"""The audit trail and the refusal counter (issue 22 §6), with the static token file as the mechanism."""

from __future__ import annotations

import logging

import aiohttp
import pytest
from prometheus_client import REGISTRY

from tests.conftest import Embedded, McpHttp


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
