"""Existing MCP servers as durable task tools (McpServer, embedded): real servers nobody here wrote.

`@modelcontextprotocol/server-everything` (npm, 2025-11-25, stdio and Streamable HTTP) and `mcp-server-time`
(PyPI, 2026-07-28, stdio), installed at pinned versions by `tests.mcp_servers`. Each test declares the server
in a fresh `--tools` folder and drives the embedded server with the raw MCP client; the mapping rows of
docs/mcp-servers.md each have a test here.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from mcp_tasks.protocol import constants
from tests.conftest import TASKS_CAPS, Embedded, McpHttp, server_settings, serving
from tests.mcp_servers import everything_command, time_command

SAMPLING_CAPS: dict[str, Any] = {**TASKS_CAPS, "sampling": {}}
NO_INPUT_CAPS: dict[str, Any] = {"extensions": {constants.TASKS_EXTENSION: {}}}


def server_manifest(name: str, command: list[str], **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"container": {"command": command}}
    body.update(spec)
    return {"apiVersion": "mcptasks.io/v1alpha1", "kind": "McpServer", "metadata": {"name": name}, "spec": body}


def write_folder(folder: Path, *documents: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "servers.yaml").write_text(yaml.safe_dump_all(documents))
    return folder


@pytest.fixture
async def everything(tmp_path: Path) -> AsyncIterator[Embedded]:
    """The embedded server with server-everything declared (stdio), cancel grace 2 s."""
    manifest = server_manifest(
        "everything", everything_command(), toolDefaults={"execution": {"cancelGraceSeconds": 2}}
    )
    folder = write_folder(tmp_path / "tools", manifest)
    settings = server_settings(tmp_path / "data")
    async with serving(replace(settings, serve=replace(settings.serve, tools_dirs=(folder,)))) as server:
        yield server


@pytest.fixture
async def client(everything: Embedded, http_session: aiohttp.ClientSession) -> McpHttp:
    return McpHttp(http_session, everything.url, changed=everything.changed)


async def test_the_servers_tools_are_listed_verbatim_and_validated_in_their_dialect(client: McpHttp) -> None:
    """MCP 2025-11-25 Tool: discovery keeps each listed tool's schemas, title and annotations; arguments are
    validated against the draft-07 schema the server declares (SEP-1303: an isError result)."""
    tools = {tool["name"]: tool for tool in (await client.request("tools/list", {})).result["tools"]}
    assert {"trigger-long-running-operation", "trigger-elicitation-request", "trigger-sampling-request"} <= set(tools)
    long = tools["trigger-long-running-operation"]
    assert long["title"] == "Trigger Long Running Operation Tool"
    assert long["inputSchema"]["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert long["annotations"]["idempotentHint"] is True
    assert "execution" not in long, "the server's own taskSupport is not ours to show"
    refused = await client.call_tool("get-sum", {"a": 1, "b": "two"})
    assert refused.result["isError"] is True


async def test_a_long_operation_shows_progress_while_it_runs_and_completes_with_the_servers_text(
    client: McpHttp,
) -> None:
    """Mapping row: `notifications/progress` → the task's `statusMessage`; the `CallToolResult` → the result."""
    task_id = await client.start_task("trigger-long-running-operation", {"duration": 3, "steps": 3})
    running = await client.wait_task(task_id, lambda t: "of 3" in t.get("statusMessage", ""))
    assert running["status"] == "working"
    done = await client.wait_status(task_id, "completed", "failed", timeout_s=30)
    assert done["status"] == "completed", done
    assert done["result"]["content"] == [
        {"type": "text", "text": "Long running operation completed. Duration: 3 seconds, Steps: 3."}
    ]
    assert done["result"]["isError"] is False
