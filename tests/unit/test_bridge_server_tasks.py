"""The pure parts of running a server tool as the server's own 2025-11-25 task (`bridge/server_tasks.py`): when
a call is task-augmented, the poll interval, the server task's states as our progress, the server's task id
kept out of what our client sees, the failure a server task that ended without a result maps to, and the
tool's `execution.taskSupport` carried from discovery to the bridge (embedded and Kubernetes)."""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
import pytest

from mcp_tasks.bridge import server_tasks
from mcp_tasks.bridge.mapping import RELATED_TASK_META, without_related_task
from mcp_tasks.bridge.server_tasks import StatusReports, TaskStatuses, augmented, failure, poll_interval_s, task_mode
from mcp_tasks.operator.server_jobs import build_server_job
from mcp_tasks.operator.settings import OperatorSettings
from mcp_tasks.runtime import contract
from mcp_tasks.tasks.servers import Discovery, parse_server_manifest, tool_specs

TASKS_CAPABLE = types.ServerCapabilities.model_validate({"tasks": {"requests": {"tools": {"call": {}}}}})
"""A server that declared `tasks.requests.tools.call` (MCP 2025-11-25 tasks, "Server Capabilities")."""


def _task(status: str = "working", message: str | None = None, **fields: Any) -> types.Task:
    """A `Task` as in the spec's `tasks/get` example (MCP 2025-11-25 tasks, "Getting Tasks")."""
    return types.Task.model_validate(
        {
            "taskId": "786512e2-9e0d-44bd-8f29-789f320fe840",
            "status": status,
            "statusMessage": message,
            "createdAt": "2025-11-25T10:30:00Z",
            "lastUpdatedAt": "2025-11-25T10:40:00Z",
            "ttl": 30000,
            "pollInterval": 5000,
            **fields,
        }
    )


@pytest.mark.parametrize("support", ["required", "optional"])
def test_a_tool_that_supports_tasks_is_called_as_a_task_only_where_the_server_declared_them(support: str) -> None:
    """Spec (MCP 2025-11-25 tasks, "Tool-Level Negotiation"): without `tasks.requests.tools.call` a client MUST
    NOT task-augment; tasks are a 2025-11-25 feature. `optional` runs as a task too: our choice (module doc)."""
    mode = task_mode(support)
    assert mode is not None
    assert augmented(mode.support, "2025-11-25", TASKS_CAPABLE)
    assert not augmented(mode.support, "2025-11-25", types.ServerCapabilities())
    assert not augmented(mode.support, "2025-11-25", None)
    assert not augmented(mode.support, "2025-06-18", TASKS_CAPABLE)
    assert not augmented(mode.support, "2026-07-28", TASKS_CAPABLE)


@pytest.mark.parametrize("value", ["forbidden", None, "", "always"])
def test_a_tool_that_does_not_support_tasks_is_called_plainly(value: str | None) -> None:
    """Spec: an absent `taskSupport` means `forbidden`; an unknown value is not acted on."""
    assert task_mode(value) is None
    assert not augmented(None, "2025-11-25", TASKS_CAPABLE)


def test_the_servers_poll_interval_is_honoured_within_bounds() -> None:
    """Spec: requestors SHOULD respect `pollInterval`; ours: 1 s when none, never under 0.1 s nor over 60 s."""
    assert poll_interval_s(_task()) == 5.0
    assert poll_interval_s(_task(pollInterval=None)) == 1.0
    assert poll_interval_s(_task(pollInterval=0)) == 0.1
    assert poll_interval_s(_task(pollInterval=10**9)) == 60.0


def test_each_new_status_message_of_the_servers_task_is_one_growing_progress_report() -> None:
    """Mapping row: the server task's `statusMessage` → our progress and `statusMessage`; an unchanged state is
    not reported again, and a state without a message shows its status."""
    reports = StatusReports()
    assert reports.report(_task(message="Gathering sources...")) == (1.0, None, "Gathering sources...")
    assert reports.report(_task(message="Gathering sources...")) is None
    assert reports.report(_task(message="Analyzing content...")) == (2.0, None, "Analyzing content...")
    assert reports.report(_task("input_required")) == (3.0, None, "the server's task is input_required")
    assert reports.report(_task("input_required")) is None


def test_the_servers_task_id_is_taken_out_of_what_reaches_our_client() -> None:
    """Spec: the server's requests and results for its task carry `_meta` `io.modelcontextprotocol/related-task`;
    ours: it is removed (other `_meta` kept, an emptied `_meta` dropped, the input left as it was)."""
    related = {RELATED_TASK_META: {"taskId": "786512e2"}}
    result = {"content": [], "_meta": related}
    assert without_related_task(result) == {"content": []}
    assert result["_meta"] == related
    mixed = {"message": "?", "_meta": {**related, "progressToken": 3}}
    assert without_related_task(mixed) == {"message": "?", "_meta": {"progressToken": 3}}
    plain = {"content": [], "_meta": {"other": 1}}
    assert without_related_task(plain) is plain


def test_a_server_task_that_ends_without_a_result_fails_ours_with_its_error_and_message() -> None:
    """Mapping row (failure rule): a `tasks/result` error keeps its code and data; the message gives the server
    task's end and `statusMessage`, never its task id."""
    error = types.ErrorData(code=-32603, message="no result stored", data={"why": 1})
    failed = failure(_task("failed", "the source was down"), error)
    assert (failed.code, failed.data) == (-32603, {"why": 1})
    assert str(failed) == ("the MCP server's task for this call ended failed: the source was down (no result stored)")
    assert "786512e2" not in str(failure(_task("cancelled"), None))


async def test_a_status_notified_before_its_task_is_followed_is_kept_and_a_later_one_wakes_the_follower() -> None:
    """Ours: `notifications/tasks/status` can arrive before the `CreateTaskResult` (server-everything sends it
    so); the latest is kept per task id, bounded, and wakes whoever follows that task."""
    statuses = TaskStatuses()
    early = types.TaskStatusNotificationParams.model_validate(
        _task(message="Gathering sources...").model_dump(by_alias=True)
    )
    await statuses.notified(early)
    latest = statuses.latest(early.task_id)
    assert latest is not None and latest.status_message == "Gathering sources..."
    changed = statuses.follow(early.task_id)
    later = early.model_copy(update={"status_message": "Analyzing content..."})
    await statuses.notified(later)
    with anyio.fail_after(5):
        await changed.wait()
    statuses.forget(early.task_id)
    assert statuses.latest(early.task_id) is None
    for n in range(server_tasks.MAX_TRACKED_STATUSES + 5):
        await statuses.notified(early.model_copy(update={"task_id": f"t{n}"}))
    assert statuses.latest("t0") is None and statuses.latest("t5") is not None


def test_the_tools_task_support_reaches_its_bridge_embedded_and_on_kubernetes() -> None:
    """Ours: discovery's listed `execution.taskSupport` (`required`, `optional`) becomes the bridge's
    `MCPTASKS_BRIDGE_TASK_SUPPORT`, in the generated tool (embedded) and in the per-call pod (Kubernetes);
    a `forbidden` tool's bridge gets none."""
    document = {
        "apiVersion": "mcptasks.io/v1alpha1",
        "kind": "McpServer",
        "metadata": {"name": "everything"},
        "spec": {"container": {"image": "registry.example/everything:1", "command": ["mcp-server-everything"]}},
    }
    server = parse_server_manifest(document, "mcpserver/everything")
    listed = [
        {"name": "research", "inputSchema": {"type": "object"}, "execution": {"taskSupport": "required"}},
        {"name": "echo", "inputSchema": {"type": "object"}, "execution": {"taskSupport": "forbidden"}},
    ]
    discovery = Discovery(protocol_version="2025-11-25", server_info={"name": "everything"}, tools=tuple(listed))
    (research, echo), refusals = tool_specs(server, discovery, ("python", "-m", "mcp_tasks.bridge"))
    assert not refusals

    def support(env: list[Any]) -> list[Any]:
        name = contract.ENV_BRIDGE_TASK_SUPPORT
        return [var for var in env if (var["name"] if isinstance(var, dict) else var.name) == name]

    assert [var.value for var in support(research.manifest.container.env)] == ["required"]
    assert support(echo.manifest.container.env) == []
    task = {
        "apiVersion": "mcptasks.io/v1alpha1",
        "kind": "McpTask",
        "metadata": {"name": "b" * 32, "namespace": "ns", "uid": "u-2", "labels": {"mcptasks.io/tool": "research"}},
    }
    settings = OperatorSettings(worker_url="http://op:8081/", bridge_image="registry.example/mcp-tasks:1")
    (bridge,) = build_server_job(task, research, settings)["spec"]["template"]["spec"]["containers"]
    assert support(bridge["env"]) == [{"name": contract.ENV_BRIDGE_TASK_SUPPORT, "value": "required"}]
