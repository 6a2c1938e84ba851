"""When the operator discovers an McpServer again, and what it writes (`operator/server_discovery.py`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mcp_tasks.operator.server_discovery import (
    RESYNC_S,
    RETRY_S,
    JobState,
    build_discovery_job,
    discovery_from_report,
    needs_discovery,
    ready_status,
)
from mcp_tasks.operator.settings import OperatorSettings
from mcp_tasks.store.kubernetes.catalog import ServerVerdict
from mcp_tasks.tasks.servers import MAX_SERVER_TOOLS, parse_server_manifest

NOW = datetime.now(UTC)


def server(generation: int = 2, **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "mcptasks.io/v1alpha1",
        "kind": "McpServer",
        "metadata": {"name": "time", "namespace": "ns", "uid": "u-9", "generation": generation},
        "spec": {"container": {"image": "registry.example/time:1", "command": ["mcp-server-time"]}},
        "status": status,
    }


def job(generation: int, ended_ago_s: float | None, succeeded: bool = False) -> JobState:
    ended_at = None if ended_ago_s is None else NOW - timedelta(seconds=ended_ago_s)
    return JobState("mcpserver-time-x", generation, ended_at is not None, succeeded, ended_at, "")


@pytest.mark.parametrize(
    ("obj", "newest", "expected"),
    [
        (server(), None, True),  # never discovered
        (server(observedGeneration=1, discoveredAt=NOW.isoformat()), None, True),  # the spec changed since
        (server(observedGeneration=2, discoveredAt=NOW.isoformat()), None, False),  # current
        (server(observedGeneration=2, discoveredAt=(NOW - timedelta(seconds=RESYNC_S)).isoformat()), None, True),
        (server(), job(2, None), False),  # one runs
        (server(), job(2, RETRY_S / 2), False),  # failed a moment ago: not in a loop
        (server(), job(2, RETRY_S * 2), True),  # failed a while ago: again
        (server(), job(1, RETRY_S / 2), True),  # the failure was of an older spec
        (server(), job(2, RETRY_S / 2, succeeded=True), False),  # ended, its report not seen yet
    ],
)
def test_when_a_server_is_discovered_again(obj: dict[str, Any], newest: JobState | None, expected: bool) -> None:
    assert needs_discovery(obj, newest, NOW) is expected


def test_ready_says_which_tools_are_refused_and_counts_the_served() -> None:
    clash = "mcpserver/time in namespace ns: tool 'divide' is refused: it is already declared by mcptool/divide"
    refused = ready_status(ServerVerdict(True, ("get_current_time",), (clash,), generation=3))
    (ready,) = refused["conditions"]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "False", "ToolsRefused")
    assert "mcptool/divide" in ready["message"] and ready["observedGeneration"] == 3
    assert refused["toolCount"] == 1 and refused["servedTools"] == ["get_current_time"]
    served = ready_status(ServerVerdict(True, ("a", "b")))
    assert served["conditions"][0]["status"] == "True" and served["toolCount"] == 2
    waiting = ready_status(ServerVerdict(False, ()))
    assert waiting["conditions"][0]["reason"] == "NotDiscovered"


def test_a_report_must_be_a_discovery() -> None:
    report = {"protocolVersion": "2025-11-25", "serverInfo": {"name": "e"}, "tools": [{"name": "x"}], "extra": 1}
    fields = discovery_from_report({"result": {"content": [], "structuredContent": report}})
    assert fields["tools"] == [{"name": "x"}] and fields["protocolVersion"] == "2025-11-25" and "extra" not in fields
    long = discovery_from_report({"result": {"structuredContent": {**report, "instructions": "i" * 70_000}}})
    assert len(long["instructions"]) == 65536  # the CRD's maxLength: the status patch would be refused
    bad_reports: list[dict[str, Any]] = [
        {},
        {"result": {"content": []}},
        {"result": {"structuredContent": {**report, "tools": ["x"]}}},
        {
            "result": {
                "structuredContent": {**report, "tools": [{"name": f"t{i}"} for i in range(MAX_SERVER_TOOLS + 1)]}
            }
        },
    ]
    for bad in bad_reports:
        with pytest.raises(ValueError):
            discovery_from_report(bad)


def test_a_discovery_job_is_the_servers_pod_with_the_bridge_reporting_to_the_worker_api() -> None:
    obj = server()
    spec = parse_server_manifest(obj, "mcpserver/time")
    settings = OperatorSettings(worker_url="http://op:8081", bridge_image="registry.example/mcp-tasks:1", instance="r")
    built = build_discovery_job(obj, spec, settings, NOW.isoformat())
    assert built["metadata"]["name"].startswith("mcpserver-time-") and len(built["metadata"]["name"]) <= 63
    assert built["metadata"]["ownerReferences"][0]["kind"] == "McpServer"
    assert built["metadata"]["ownerReferences"][0]["uid"] == "u-9"
    labels = built["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/component"] == "tool-run" and labels["app.kubernetes.io/instance"] == "r"
    assert "mcptasks.io/task-id" not in labels  # not a task's: the reconciler leaves it alone
    pod = built["spec"]["template"]["spec"]
    (bridge,) = pod["containers"]
    assert bridge["command"] == ["python", "-m", "mcp_tasks.bridge", "discover"]
    env = {var["name"]: var.get("value") for var in bridge["env"]}
    assert env["MCPTASKS_WORKER_URL"] == "http://op:8081/v1/discoveries/time"
    assert "MCPTASKS_TASK_ID" not in env
    assert [c["name"] for c in pod["initContainers"]] == ["fifos", "server"]
    assert built["spec"]["backoffLimit"] == 0 and built["spec"]["activeDeadlineSeconds"] > 0
