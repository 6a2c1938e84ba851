"""Existing MCP servers as durable task tools (McpServer, embedded): real servers nobody here wrote.

`@modelcontextprotocol/server-everything` (npm, 2025-11-25, stdio and Streamable HTTP) and `mcp-server-time`
(PyPI, 2026-07-28, stdio), installed at pinned versions by `tests.mcp_servers`. Each test declares the server
in a fresh `--tools` folder and drives the embedded server with the raw MCP client; the mapping rows of
docs/mcp-servers.md each have a test here.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from mcp_tasks.cli.settings import Settings
from mcp_tasks.protocol import constants
from mcp_tasks.store.manifests import FileToolCatalog
from mcp_tasks.tasks.errors import InvalidToolManifest
from tests.conftest import PLAIN_CAPS, TASKS_CAPS, Embedded, McpHttp, exited, server_settings, serving, until
from tests.e2e.test_durability import ServerProcess, tool_pids
from tests.mcp_servers import everything_command, time_command

SAMPLING_CAPS: dict[str, Any] = {**TASKS_CAPS, "sampling": {}}
NO_INPUT_CAPS: dict[str, Any] = {"extensions": {constants.TASKS_EXTENSION: {}}}


def server_manifest(name: str, command: list[str], **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"container": {"command": command}}
    body.update(spec)
    return {"apiVersion": "mcptasks.io/v1alpha1", "kind": "McpServer", "metadata": {"name": name}, "spec": body}


def warm_everything_settings(folder: Path) -> Settings:
    """An embedded server's settings with only server-everything, warm (1 worker, 2 calls at once), its tools
    named `w-<tool>`; its tools and data under `folder`."""
    warm = server_manifest("everything-warm", everything_command(), warm={"minWorkers": 1, "concurrency": 2})
    tools = write_folder(folder / "tools", {**warm, "spec": {**warm["spec"], "toolNamePrefix": "w-"}})
    settings = server_settings(folder / "data")
    return replace(settings, serve=replace(settings.serve, tools_dirs=(tools,)))


def write_folder(folder: Path, *documents: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "servers.yaml").write_text(yaml.safe_dump_all(documents))
    return folder


@pytest.fixture
async def everything(tmp_path: Path) -> AsyncIterator[Embedded]:
    """The embedded server with server-everything declared (stdio), cancel grace 2 s (5 s, the default, for
    the research tool, whose server outlives the closing of its stdin by the SDK's 2 s wait: its task timers)."""
    manifest = server_manifest(
        "everything",
        everything_command(),
        toolDefaults={"execution": {"cancelGraceSeconds": 2}},
        tools={"simulate-research-query": {"execution": {"cancelGraceSeconds": 5}}},
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


async def test_an_elicitation_goes_input_required_and_the_answer_reaches_the_server(client: McpHttp) -> None:
    """Mapping row: the server's `elicitation/create` → the task's `inputRequests`; the answer given through
    `tasks/update` → the response to the waiting server request (tasks extension 2026-07-28 `tasks/update`)."""
    task_id = await client.start_task("trigger-elicitation-request", {})
    asked = await client.wait_status(task_id, "input_required", timeout_s=20)
    ((key, request),) = asked["inputRequests"].items()
    assert request["method"] == "elicitation/create"
    assert request["params"]["requestedSchema"]["properties"]["name"]["type"] == "string"
    await client.update(task_id, {key: {"action": "accept", "content": {"name": "Ada Lovelace", "check": True}}})
    done = await client.wait_status(task_id, "completed", "failed", timeout_s=20)
    assert done["status"] == "completed", done
    texts = [block["text"] for block in done["result"]["content"]]
    assert "User inputs:\n- Name: Ada Lovelace" in "".join(texts), texts


async def test_a_sampling_request_is_put_to_a_client_that_declared_sampling(client: McpHttp) -> None:
    """Mapping row: `sampling/createMessage` → an input request, answered with a `CreateMessageResult`."""
    reply = await client.call_tool("trigger-sampling-request", {"prompt": "hello"}, caps=SAMPLING_CAPS)
    task_id = reply.result["taskId"]
    asked = await client.wait_task(task_id, lambda t: t["status"] == "input_required", timeout_s=20)
    ((key, request),) = asked["inputRequests"].items()
    assert request["method"] == "sampling/createMessage"
    assert "hello" in request["params"]["messages"][0]["content"]["text"]
    answer = {"role": "assistant", "content": {"type": "text", "text": "a sampled reply"}, "model": "test-model"}
    await client.update(task_id, {key: answer}, caps=SAMPLING_CAPS)
    done = await client.wait_status(task_id, "completed", "failed", timeout_s=20)
    assert done["status"] == "completed", done
    assert "a sampled reply" in done["result"]["content"][0]["text"]
    assert done["result"]["isError"] is False


async def test_a_sampling_request_is_refused_clearly_for_a_client_that_did_not_declare_it(client: McpHttp) -> None:
    """Mapping row (capability rule, as for native tools): a kind the calling client did not declare is never
    put; the server gets an error naming it, and its tool reports that error (here as `isError`)."""
    task_id = await client.start_task("trigger-sampling-request", {"prompt": "hello"})
    done = await client.wait_status(task_id, "completed", "failed", timeout_s=20)
    assert "inputRequests" not in done
    text = json.dumps(done.get("result") or done.get("error"))
    assert "cannot answer sampling/createMessage" in text and "sampling" in text, done


async def test_roots_are_put_to_a_client_that_declared_them(client: McpHttp) -> None:
    """Mapping row: the server's `roots/list` → an input request; the client's roots reach the server (which
    also asks for them on its own soon after start: every such request is an input request of the task)."""
    caps = {**TASKS_CAPS, "roots": {}}
    task_id = (await client.call_tool("get-roots-list", {}, caps=caps)).result["taskId"]
    roots = {"roots": [{"uri": "file:///srv/project", "name": "project"}]}

    async def settled() -> dict[str, Any] | None:
        task = (await client.get(task_id)).result
        if task["status"] == "input_required":
            assert {r["method"] for r in task["inputRequests"].values()} == {"roots/list"}
            await client.update(task_id, {key: roots for key in task["inputRequests"]}, caps=caps)
            return None
        return task if task["status"] in {"completed", "failed"} else None

    done = await until(settled, timeout_s=30, changed=client.changed)
    assert done["status"] == "completed", done
    assert "file:///srv/project" in json.dumps(done["result"])


async def test_a_cancelled_long_operation_ends_cancelled_and_its_server_is_stopped(
    client: McpHttp, everything: Embedded
) -> None:
    """Mapping row: `tasks/cancel` → the bridge abandons the call (`notifications/cancelled`) and the server
    is stopped; the task ends `cancelled` (tasks extension 2026-07-28 `tasks/cancel`)."""
    task_id = await client.start_task("trigger-long-running-operation", {"duration": 60, "steps": 60})
    await client.wait_task(task_id, lambda t: "of 60" in t.get("statusMessage", ""), timeout_s=20)
    servers = server_pids(task_id)
    assert len(servers) == 1, servers
    await client.cancel(task_id)
    done = await client.wait_status(task_id, "cancelled", "completed", "failed", timeout_s=20)
    assert done["status"] == "cancelled", done
    await exited(servers[0], timeout_s=15)


async def test_a_tool_the_server_runs_as_its_own_task_is_one_of_ours_with_its_status_messages_and_result(
    client: McpHttp,
) -> None:
    """Mapping row: server-everything's `simulate-research-query` lists `execution.taskSupport: required`; the
    bridge calls it with `task` (MCP 2025-11-25 tasks), follows the server's task with `tasks/get`, shows each
    server `statusMessage` on our task while it runs, and records the `tasks/result` `CallToolResult` as our
    result. The server's task id stays inside the bridge (its related-task `_meta` is not passed on)."""
    task_id = await client.start_task("simulate-research-query", {"topic": "tides"})
    running = await client.wait_task(task_id, lambda t: t.get("statusMessage") == "Analyzing content...")
    assert running["status"] == "working", running
    done = await client.wait_status(task_id, "completed", "failed", timeout_s=30)
    assert done["status"] == "completed", done
    (block,) = done["result"]["content"]
    assert block["text"].startswith("# Research Report: tides\n"), block
    assert "related-task" not in json.dumps(done), done


async def test_a_server_tasks_elicitation_is_an_input_round_of_ours(client: McpHttp) -> None:
    """Mapping row: the server's task goes `input_required` and delivers its `elicitation/create` over
    `tasks/result` (MCP 2025-11-25 tasks, "Input Required Status"); it becomes our task's input request
    (without the server's related-task `_meta`), and the answer given through `tasks/update` reaches the
    server, whose report names it."""
    task_id = await client.start_task("simulate-research-query", {"topic": "python", "ambiguous": True})
    asked = await client.wait_status(task_id, "input_required", timeout_s=20)
    ((key, request),) = asked["inputRequests"].items()
    assert request["method"] == "elicitation/create"
    choices = request["params"]["requestedSchema"]["properties"]["interpretation"]["oneOf"]
    assert {"const": "snake", "title": "Python snake species"} in choices
    assert "_meta" not in request["params"], request
    await client.update(task_id, {key: {"action": "accept", "content": {"interpretation": "snake"}}})
    done = await client.wait_status(task_id, "completed", "failed", timeout_s=30)
    assert done["status"] == "completed", done
    assert done["result"]["content"][0]["text"].startswith("# Research Report: python (snake)\n"), done


async def test_a_cancel_of_ours_cancels_the_servers_task_per_call_and_warm(
    client: McpHttp, tmp_path: Path, http_session: aiohttp.ClientSession
) -> None:
    """Mapping row: our `tasks/cancel` of a call the server runs as its task → the server's `tasks/cancel`
    (tasks extension 2026-07-28 `tasks/cancel` → MCP 2025-11-25 `tasks/cancel`); our task ends `cancelled`.
    Per call, the server is then stopped. Warm, the server lives on, so what it did is seen on the worker's
    stderr (the runner keeps it): its own `tasks/get` shows the task `cancelled` with its message, and the
    research it was running fails its next step, which a cancelled task may not take."""
    task_id = await client.start_task("simulate-research-query", {"topic": "tides"})
    await client.wait_task(task_id, lambda t: t.get("statusMessage") == "Analyzing content...", timeout_s=20)
    servers = server_pids(task_id)
    assert len(servers) == 1, servers
    await client.cancel(task_id)
    done = await client.wait_status(task_id, "cancelled", "completed", "failed", timeout_s=20)
    assert done["status"] == "cancelled", done
    await exited(servers[0], timeout_s=15)

    async with serving(warm_everything_settings(tmp_path / "warm")) as embedded:
        mcp = McpHttp(http_session, embedded.url, changed=embedded.changed)
        task_id = await mcp.start_task("w-simulate-research-query", {"topic": "tides"})
        await mcp.wait_task(task_id, lambda t: t.get("statusMessage") == "Analyzing content...", timeout_s=30)
        await mcp.cancel(task_id)
        done = await mcp.wait_status(task_id, "cancelled", "completed", "failed", timeout_s=20)
        assert done["status"] == "cancelled", done
        runs = tmp_path / "warm" / "data" / "runs"
        line = "the server's task for this call is cancelled: Client cancelled task execution."
        await until(lambda: _logged(runs, line), timeout_s=20)
        await until(lambda: _logged(runs, 'from terminal status "cancelled" to "working"'), timeout_s=20)
        (worker,) = tool_pids("w-simulate-research-query", "MCPTASKS_SERVE_TOOL")
        servers = descendants(worker)
    # The warm worker ends with `mcptasks serve`, and its server with it (the keeper, docs/mcp-servers.md §4).
    for pid in servers:
        await exited(pid, timeout_s=20)


async def test_an_idempotent_tools_call_is_sent_again_when_its_server_dies_mid_call(client: McpHttp) -> None:
    """Mapping row (outcome rule): the server exits mid-call and the tool is idempotent (its `idempotentHint`)
    → the bridge sends the call again to a fresh server, and the task completes with its result."""
    task_id = await client.start_task("trigger-long-running-operation", {"duration": 4, "steps": 4})
    await client.wait_task(task_id, lambda t: "of 4" in t.get("statusMessage", ""), timeout_s=20)
    (first,) = server_pids(task_id)
    os.kill(first, signal.SIGKILL)
    done = await client.wait_status(task_id, "completed", "failed", timeout_s=40)
    assert done["status"] == "completed", done
    assert done["result"]["content"][0]["text"].startswith("Long running operation completed")


def server_pids(task_id: str) -> list[int]:
    """Pids of the MCP server processes a task's bridge started: children of the bridge, which has the task's
    id in its environment (the server itself gets only its spec's environment). Each is the server's keeper
    (`bridge.keeper`), which exits as its server does, and takes the server with it when killed."""
    bridges = {str(pid) for pid in tool_pids(task_id)}
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = (entry / "stat").read_text().rsplit(")", 1)[1].split()[1]
            except (OSError, IndexError):
                continue
            if parent in bridges and not (entry / "environ").read_bytes().count(b"MCPTASKS_TASK_ID="):
                found.append(int(entry.name))
    return found


async def test_a_call_without_the_tasks_extension_is_answered_synchronously(client: McpHttp) -> None:
    """`taskPolicy: optional` (the default): a call without the extension runs through the synchronous path
    and gets the server's `CallToolResult` directly, no task (SEP-2663 Negotiation)."""
    reply = await client.call_tool("get-sum", {"a": 2, "b": 3}, caps=PLAIN_CAPS)
    assert reply.result.get("resultType") != "task", reply.body
    assert reply.result["content"][0]["text"] == "The sum of 2 and 3 is 5."


async def test_a_synchronous_call_takes_the_servers_elicitation_as_an_input_round(client: McpHttp) -> None:
    """The synchronous path with input (issue: "its server-to-client requests as input rounds (MRTR) exactly as
    for native tools"): a 2026-07-28 client without the extension gets an `InputRequiredResult`, retries with
    the answer and its `requestState`, and the same run on the server goes on (SEP-2322)."""
    caps: dict[str, Any] = {"elicitation": {}}
    first = (await client.call_tool("trigger-elicitation-request", {}, caps=caps)).result
    assert first["resultType"] == "input_required", first
    ((key, request),) = first["inputRequests"].items()
    assert request["method"] == "elicitation/create"
    answer = {"inputResponses": {key: {"action": "accept", "content": {"name": "Grace Hopper"}}}}
    extra = {**answer, "requestState": first["requestState"]}
    done = (await client.call_tool("trigger-elicitation-request", {}, caps=caps, extra=extra)).result
    assert "- Name: Grace Hopper" in json.dumps(done["content"]), done


async def test_a_streamable_http_server_gets_a_free_port_per_call(
    tmp_path: Path, http_session: aiohttp.ClientSession
) -> None:
    """McpServer `transport: streamable-http`, embedded: the bridge starts the server with a free loopback port
    in `http.portEnv`, so calls never clash on a port; progress flows over the HTTP stream as over stdio."""
    manifest = server_manifest(
        "everything-http",
        everything_command("streamableHttp"),
        transport="streamable-http",
        http={"port": 3001, "path": "/mcp", "portEnv": "PORT"},
        toolNamePrefix="http-",
    )
    folder = write_folder(tmp_path / "tools", manifest)
    settings = server_settings(tmp_path / "data")
    async with serving(replace(settings, serve=replace(settings.serve, tools_dirs=(folder,)))) as server:
        mcp = McpHttp(http_session, server.url, changed=server.changed)
        first = await mcp.start_task("http-trigger-long-running-operation", {"duration": 2, "steps": 2})
        second = await mcp.start_task("http-get-sum", {"a": 1, "b": 41})
        running = await mcp.wait_task(first, lambda t: "of 2" in t.get("statusMessage", ""), timeout_s=30)
        assert running["status"] in {"working", "completed"}
        summed = await mcp.wait_status(second, "completed", "failed", timeout_s=30)
        assert summed["result"]["content"][0]["text"] == "The sum of 1 and 41 is 42.", summed
        done = await mcp.wait_status(first, "completed", "failed", timeout_s=30)
        assert done["result"]["content"][0]["text"].startswith("Long running operation completed"), done


@pytest.fixture
async def time_server(tmp_path: Path) -> AsyncIterator[Embedded]:
    """mcp-server-time (2026-07-28, `server/discover`) twice: per call (`time_` prefix) and warm (`warm_`)."""
    folder = write_folder(
        tmp_path / "tools",
        server_manifest("time", time_command(), toolNamePrefix="time_"),
        server_manifest("time-warm", time_command(), toolNamePrefix="warm_", warm={"minWorkers": 1, "concurrency": 4}),
    )
    settings = server_settings(tmp_path / "data")
    async with serving(replace(settings, serve=replace(settings.serve, tools_dirs=(folder,)))) as server:
        yield server


async def test_mcp_server_time_works_per_call_and_warm(
    time_server: Embedded, http_session: aiohttp.ClientSession
) -> None:
    """A 2026-07-28 server (`server/discover`) per call and warm: concurrent warm calls share one connection,
    each with its own request id; the result's `structuredContent` passes the listed `outputSchema`."""
    mcp = McpHttp(http_session, time_server.url, changed=time_server.changed)
    tools = {tool["name"] for tool in (await mcp.request("tools/list", {})).result["tools"]}
    assert {"time_get_current_time", "time_convert_time", "warm_get_current_time", "warm_convert_time"} <= tools
    per_call = await mcp.start_task("time_get_current_time", {"timezone": "Europe/Warsaw"})
    done = await mcp.wait_status(per_call, "completed", "failed", timeout_s=30)
    assert done["status"] == "completed", done
    assert done["result"]["structuredContent"]["timezone"] == "Europe/Warsaw"
    warm = [
        await mcp.start_task("warm_convert_time", {"source_timezone": "UTC", "time": "12:00", "target_timezone": zone})
        for zone in ("Asia/Tokyo", "America/New_York", "Europe/London")
    ]
    ends = [await mcp.wait_status(task_id, "completed", "failed", timeout_s=30) for task_id in warm]
    assert [end["result"]["structuredContent"]["target"]["timezone"] for end in ends] == [
        "Asia/Tokyo",
        "America/New_York",
        "Europe/London",
    ], ends
    (worker,) = tool_pids("warm_convert_time", "MCPTASKS_SERVE_TOOL")
    assert len(children_of(worker)) == 1, "one server process behind the warm worker took all three calls"
    sync = await mcp.call_tool("warm_get_current_time", {"timezone": "Asia/Kolkata"}, caps=PLAIN_CAPS)
    assert sync.result["structuredContent"]["timezone"] == "Asia/Kolkata", sync.body


def children_of(pid: int) -> list[int]:
    """Live child processes of `pid`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "stat").read_text().rsplit(")", 1)[1].split()[1] == str(pid):
                    found.append(int(entry.name))
            except (OSError, IndexError):
                continue
    return found


def descendants(pid: int) -> list[int]:
    """Live processes below `pid` (children, their children, ...)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(parent, []).append(int(entry.name))
    found, queue = [], [pid]
    while queue:
        below = parents.get(queue.pop(), [])
        found.extend(below)
        queue.extend(below)
    return found


async def test_a_kill_9_of_the_bridge_mid_operation_leaves_no_server_process(client: McpHttp) -> None:
    """docs/mcp-servers.md §4 (ours): a server never outlives the bridge that started it, however the bridge
    ends; here a SIGKILL of a per-call bridge (as the runner's after `cancelGraceSeconds`), so nothing stops
    the server the SDK's way, and the server (its research task's timers) would outlive its closed stdin."""
    task_id = await client.start_task("simulate-research-query", {"topic": "tides"})
    await client.wait_task(task_id, lambda t: t.get("statusMessage") == "Analyzing content...", timeout_s=20)
    (bridge,) = tool_pids(task_id)
    servers = descendants(bridge)
    assert len(servers) == 2, servers  # the keeper and the server
    os.kill(bridge, signal.SIGKILL)
    for pid in servers:
        await exited(pid, timeout_s=20)


async def test_a_stopped_warm_worker_leaves_no_server_process(
    tmp_path: Path, http_session: aiohttp.ClientSession
) -> None:
    """docs/mcp-servers.md §4 (ours): a warm worker ends with os._exit (runtime.serve), so the SDK never stops
    its server; stopped mid-call (here with `mcptasks serve`), it leaves no server process behind, though
    this one (its research task's timers) would outlive its closed stdin."""
    async with serving(warm_everything_settings(tmp_path)) as embedded:
        mcp = McpHttp(http_session, embedded.url, changed=embedded.changed)
        task_id = await mcp.start_task("w-simulate-research-query", {"topic": "tides"})
        await mcp.wait_task(task_id, lambda t: t.get("statusMessage") == "Analyzing content...", timeout_s=30)
        (worker,) = tool_pids("w-simulate-research-query", "MCPTASKS_SERVE_TOOL")
        servers = descendants(worker)
        assert len(servers) == 2, servers  # the keeper and the server
    for pid in [worker, *servers]:
        await exited(pid, timeout_s=20)


async def test_a_kill_9_of_the_server_mid_operation_loses_nothing(
    tmp_path: Path, http_session: aiohttp.ClientSession
) -> None:
    """Restart rule (ours, docs/design.md §7) for a server tool: the bridge is the tool's process, so it outlives
    a kill -9 of `mcptasks serve` with its MCP server, is adopted by the next start (which discovers the
    server again first), and its one run's result lands."""
    folder = write_folder(tmp_path / "tools", server_manifest("everything", everything_command()))
    server = ServerProcess(tmp_path / "data", "--tools", str(folder))
    try:
        mcp = McpHttp(http_session, await server.start())
        task_id = await mcp.start_task("trigger-long-running-operation", {"duration": 6, "steps": 6})
        await mcp.wait_task(task_id, lambda t: "of 6" in t.get("statusMessage", ""), timeout_s=30)
        (bridge,) = tool_pids(task_id)
        (child,) = server_pids(task_id)
        await server.kill()
        mcp = McpHttp(http_session, await server.start())
        done = await mcp.wait_status(task_id, "completed", "failed", "cancelled", timeout_s=40)
        assert done["status"] == "completed", done
        assert done["result"]["content"][0]["text"] == (
            "Long running operation completed. Duration: 6 seconds, Steps: 6."
        )
        await exited(bridge, timeout_s=10)  # the adopted bridge, its result in, is gone with its server
        await exited(child, timeout_s=10)
    finally:
        await server.stop()


async def test_a_hostile_server_cannot_crash_or_stall_the_bridge_or_the_gateway(
    tmp_path: Path, http_session: aiohttp.ClientSession
) -> None:
    """Least privilege (issue: hostile servers): malformed JSON on stdout, an unknown notification and a request
    of an unknown method, 5000 progress and 5000 log notifications, then a 3 MB result: the task completes,
    the result is an artifact link (the inline cap holds); `notifications/message` becomes a line of the
    bridge's stderr (mapping row: log lines); a server that never answers is cancelled, and it
    got `notifications/cancelled` for the call it was sent; one that exits mid-call leaves the outcome
    unknown (not idempotent); a JSON-RPC error answer fails the task with that error."""
    journal = tmp_path / "journal.ndjson"
    script = Path(__file__).resolve().parent.parent / "hostile_mcp_server.py"
    manifest = server_manifest(
        "hostile",
        [sys.executable, str(script), str(journal)],
        toolDefaults={"execution": {"cancelGraceSeconds": 3}},
    )
    folder = write_folder(tmp_path / "tools", manifest)
    settings = server_settings(tmp_path / "data")
    async with serving(replace(settings, serve=replace(settings.serve, tools_dirs=(folder,)))) as embedded:
        mcp = McpHttp(http_session, embedded.url, changed=embedded.changed)
        flood = await mcp.start_task("flood", {"count": 5000, "size": 3_000_000})
        done = await mcp.wait_status(flood, "completed", "failed", timeout_s=60)
        assert done["status"] == "completed", done
        assert any(block["type"] == "resource_link" for block in done["result"]["content"]), done
        hang = await mcp.start_task("hang", {})
        await until(lambda: _sent(journal, "hang"), timeout_s=20)
        runs = tmp_path / "data" / "runs"
        await until(lambda: _logged(runs, "[hostile] warning h: hanging"), timeout_s=20)
        listed = await mcp.request("tools/list", {})
        assert {tool["name"] for tool in listed.result["tools"]} == {"flood", "hang", "die", "refuse", "slow"}
        await mcp.cancel(hang)
        assert (await mcp.wait_status(hang, "cancelled", "completed", "failed", timeout_s=20))["status"] == "cancelled"
        await until(lambda: _cancelled(journal), timeout_s=20)
        died = await mcp.start_task("die", {})
        lost = await mcp.wait_status(died, "completed", "failed", timeout_s=20)
        assert lost["status"] == "completed" and lost["result"]["isError"] is True, lost
        assert "outcome is unknown" in lost["result"]["content"][0]["text"]
        refused = await mcp.wait_status(await mcp.start_task("refuse", {}), "completed", "failed", timeout_s=20)
        assert refused["status"] == "failed", refused
        assert refused["error"] == {"code": -32050, "message": "refused by the server", "data": {"why": "test"}}


async def _logged(runs: Path, line: str) -> bool:
    """Whether a running bridge's stderr (the runner keeps it as `<execution id>.stderr`) holds `line`."""
    return any(line in path.read_text(errors="replace") for path in runs.glob("*.stderr"))


async def _sent(journal: Path, tool: str) -> bool:
    lines = journal.read_text().splitlines() if journal.exists() else []
    return any('"tools/call"' in line and f'"{tool}"' in line for line in lines)


async def _cancelled(journal: Path) -> bool:
    """Whether the server got `notifications/cancelled` naming the request id of its `hang` call."""
    messages = [json.loads(line) for line in journal.read_text().splitlines()]
    calls = {m["id"] for m in messages if m.get("method") == "tools/call" and m["params"]["name"] == "hang"}
    return any(m.get("method") == "notifications/cancelled" and m["params"].get("requestId") in calls for m in messages)


async def test_a_resync_lists_the_tools_a_server_gained_and_drops_those_it_lost(
    tmp_path: Path, http_session: aiohttp.ClientSession
) -> None:
    """McpServer `resyncIntervalSeconds` (issue: periodic resync): discovery runs again, and `tools/list`
    follows what the server lists now, without a restart."""
    journal = tmp_path / "journal.ndjson"
    script = Path(__file__).resolve().parent.parent / "hostile_mcp_server.py"
    manifest = server_manifest("hostile", [sys.executable, str(script), str(journal)], resyncIntervalSeconds=0.5)
    folder = write_folder(tmp_path / "tools", manifest)
    settings = server_settings(tmp_path / "data")
    async with serving(replace(settings, serve=replace(settings.serve, tools_dirs=(folder,)))) as embedded:
        mcp = McpHttp(http_session, embedded.url, changed=embedded.changed)

        async def listed() -> set[str]:
            return {tool["name"] for tool in (await mcp.request("tools/list", {})).result["tools"]}

        assert "late" not in await listed()
        journal.with_name(journal.name + ".tools").write_text("late\n")
        await until(lambda: _has(listed, "late"), timeout_s=20)
        done = await mcp.wait_status(await mcp.start_task("late", {}), "completed", "failed", timeout_s=20)
        assert done["status"] == "completed", done
        journal.with_name(journal.name + ".tools").write_text("")
        await until(lambda: _has(listed, "late", present=False), timeout_s=20)


async def _has(listed: Any, name: str, present: bool = True) -> bool:
    return (name in await listed()) == present


async def test_warm_calls_overlap_on_one_connection_each_with_its_own_request_id_and_progress_token(
    tmp_path: Path, http_session: aiohttp.ClientSession
) -> None:
    """McpServer `warm` (issue: one connection, concurrent calls): two tasks in flight at once reach one server
    after one handshake, with distinct JSON-RPC ids and progress tokens, and each gets its own answer."""
    journal = tmp_path / "journal.ndjson"
    script = Path(__file__).resolve().parent.parent / "hostile_mcp_server.py"
    manifest = server_manifest(
        "hostile", [sys.executable, str(script), str(journal)], warm={"minWorkers": 1, "concurrency": 2}
    )
    folder = write_folder(tmp_path / "tools", manifest)
    settings = server_settings(tmp_path / "data")
    async with serving(replace(settings, serve=replace(settings.serve, tools_dirs=(folder,)))) as embedded:
        mcp = McpHttp(http_session, embedded.url, changed=embedded.changed)
        first = await mcp.start_task("slow", {"seconds": 3})
        second = await mcp.start_task("slow", {"seconds": 3})
        ends = [await mcp.wait_status(task, "completed", "failed", timeout_s=30) for task in (first, second)]
    messages = [json.loads(line) for line in journal.read_text().splitlines()]
    calls = [m for m in messages if m.get("method") == "tools/call" and m["params"]["name"] == "slow"]
    assert len(calls) == 2 and calls[0]["id"] != calls[1]["id"]
    tokens = {call["params"]["_meta"]["progressToken"] for call in calls}
    assert len(tokens) == 2, calls
    assert [m.get("method") for m in messages].count("initialize") == 2, "discovery's, then the warm worker's"
    second_sent = messages.index(calls[1])
    first_answered = messages.index({"answered": calls[0]["id"]})
    assert second_sent < first_answered, "the second call went out while the first was still running"
    assert sorted(end["result"]["content"][0]["text"] for end in ends) == sorted(f"slow {c['id']}" for c in calls)


async def test_a_server_tool_that_clashes_with_another_tool_stops_start_up_naming_both(tmp_path: Path) -> None:
    """Issue: "a clash with another tool is refused naming both" (here an McpTool `flood` and the server's)."""
    script = Path(__file__).resolve().parent.parent / "hostile_mcp_server.py"
    tool = {
        "apiVersion": "mcptasks.io/v1alpha1",
        "kind": "McpTool",
        "metadata": {"name": "flood"},
        "spec": {
            "name": "flood",
            "description": "a native tool",
            "inputSchema": {"type": "object"},
            "container": {"command": ["python", "-c", "pass"]},
        },
    }
    server = server_manifest("hostile", [sys.executable, str(script), str(tmp_path / "journal")])
    folder = write_folder(tmp_path / "tools", tool, server)
    catalog = FileToolCatalog([folder])
    with pytest.raises(InvalidToolManifest) as refused:
        await catalog.discover_servers()
    message = str(refused.value)
    assert "'flood' of McpServer 'hostile'" in message and f"declared in {folder / 'servers.yaml'}" in message
    prefixed = write_folder(tmp_path / "prefixed", tool, {**server, "spec": {**server["spec"], "toolNamePrefix": "h_"}})
    catalog = FileToolCatalog([prefixed])
    assert await catalog.discover_servers() == []
    assert {"flood", "h_flood"} <= {spec.name for spec in catalog.list_tools()}
