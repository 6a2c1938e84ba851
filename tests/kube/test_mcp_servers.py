"""McpServer on the real control plane: the CRD (schema, CEL rules, status subresource, printer columns), the
catalog serving its discovered tools from status, and the per-call Job's pod shape (docs/mcp-servers.md,
Kubernetes). Discovery and calls through a real server's pod are the real-node tier's (`tests/node/`).
"""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from typing import Any

import aiohttp
import pytest
import yaml
from kubernetes_asyncio.client import ApiClient

from mcp_tasks.operator.server_jobs import build_server_job
from mcp_tasks.operator.settings import OperatorSettings
from mcp_tasks.store.kubernetes.catalog import KubernetesToolCatalog
from mcp_tasks.tasks.servers import Discovery, ServerToolSpec, parse_server_manifest, tool_specs
from tests.controlplane.cluster import ControlPlane, free_port
from tests.kube.conftest import Gateways, Operators, client, until
from tests.mcp_servers import everything_command, time_command

EVERYTHING: dict[str, Any] = {
    "apiVersion": "mcptasks.io/v1alpha1",
    "kind": "McpServer",
    "metadata": {"name": "everything"},
    "spec": {
        "transport": "stdio",
        "container": {
            "image": "registry.example/mcp/server-everything:2026.8.31",
            "command": ["mcp-server-everything", "stdio"],
        },
        "tools": {"get-env": {"expose": False}},
    },
}


def _apply(plane: ControlPlane, namespace: str, *documents: dict[str, Any]) -> str:
    return plane.kubectl("apply", "-n", namespace, "-f", "-", input_text=yaml.safe_dump_all(documents))


def test_the_crd_refuses_what_the_operator_could_not_run(control_plane: ControlPlane, namespace: str) -> None:
    no_command = json.loads(json.dumps(EVERYTHING))
    no_command["metadata"]["name"] = "no-command"
    del no_command["spec"]["container"]["command"]
    with pytest.raises(subprocess.CalledProcessError) as refused:
        _apply(control_plane, namespace, no_command)
    assert "spec.container.command: Required value" in str(refused.value.stderr)
    http_without_port = {**EVERYTHING, "metadata": {"name": "http"}, "spec": {**EVERYTHING["spec"]}}
    http_without_port["spec"]["transport"] = "streamable-http"
    with pytest.raises(subprocess.CalledProcessError) as refused:
        _apply(control_plane, namespace, http_without_port)
    assert "transport streamable-http needs spec.http" in str(refused.value.stderr)
    no_image = json.loads(json.dumps(EVERYTHING))
    no_image["metadata"]["name"] = "no-image"
    del no_image["spec"]["container"]["image"]
    with pytest.raises(subprocess.CalledProcessError) as refused:
        _apply(control_plane, namespace, no_image)
    assert "image" in str(refused.value.stderr)


def test_status_is_a_subresource_and_kubectl_get_shows_transport_tools_and_ready(
    control_plane: ControlPlane, namespace: str
) -> None:
    _apply(control_plane, namespace, EVERYTHING)
    since = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = {
        "protocolVersion": "2025-11-25",
        "serverInfo": {"name": "mcp-servers/everything", "version": "2.0.0", "futureField": 1},
        "tools": [{"name": "echo", "inputSchema": {"type": "object"}, "x-vendor": {"kept": True}}],
        "toolCount": 1,
        "servedTools": ["echo"],
        "observedGeneration": 1,
        "conditions": [
            {
                "type": "Discovered",
                "status": "True",
                "reason": "Discovered",
                "lastTransitionTime": since,
            },
            {"type": "Ready", "status": "True", "reason": "Served", "lastTransitionTime": since},
        ],
    }
    control_plane.kubectl(
        "patch", "-n", namespace, "mcpserver/everything", "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": status}),
    )  # fmt: skip
    read = json.loads(control_plane.kubectl("get", "-n", namespace, "mcpserver/everything", "-o", "json"))
    assert read["status"]["tools"][0]["x-vendor"] == {"kept": True}  # a Tool is kept verbatim
    assert read["status"]["serverInfo"]["futureField"] == 1
    assert read["spec"]["transport"] == "stdio"
    table = control_plane.kubectl("get", "-n", namespace, "mcpservers").splitlines()
    assert table[0].split()[:4] == ["NAME", "TRANSPORT", "TOOLS", "READY"], table
    assert table[1].split()[:4] == ["everything", "stdio", "1", "True"], table
    wide = control_plane.kubectl("get", "-n", namespace, "mcps", "-o", "wide").splitlines()
    assert "2025-11-25" in wide[1] and "mcp-servers/everything" in wide[1], wide
    # a spec change through the main resource never touches status (the subresource is the operator's)
    control_plane.kubectl(
        "patch", "-n", namespace, "mcpserver/everything", "--type=merge", "-p", json.dumps({"status": {"toolCount": 9}})
    )
    read = json.loads(control_plane.kubectl("get", "-n", namespace, "mcpserver/everything", "-o", "json"))
    assert read["status"]["toolCount"] == 1


def _discovered(tools: list[dict[str, Any]], generation: int = 1) -> dict[str, Any]:
    """An McpServer status as the operator's discovery writes it (`operator/server_discovery.py`)."""
    return {
        "protocolVersion": "2025-06-18",
        "serverInfo": {"name": "mcp-time", "version": "1.0.0"},
        "capabilities": {"tools": {"listChanged": True}},
        "tools": tools,
        "observedGeneration": generation,
    }


GET_TIME: dict[str, Any] = {
    "name": "get_current_time",
    "description": "Get current time in a specific timezone",
    "inputSchema": {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {"timezone": {"type": "string"}},
        "required": ["timezone"],
    },
    "annotations": {"readOnlyHint": True},
    "_meta": {"vendor/x": 1},
}


async def test_the_catalog_serves_discovered_tools_from_status_and_refuses_a_clash_naming_both(
    control_plane: ControlPlane, namespace: str, api_client: ApiClient
) -> None:
    time_server: dict[str, Any] = {
        "apiVersion": "mcptasks.io/v1alpha1",
        "kind": "McpServer",
        "metadata": {"name": "time"},
        "spec": {
            "container": {"image": "registry.example/mcp/time:1", "command": ["mcp-server-time"]},
            "toolNamePrefix": "",
        },
    }
    _apply(control_plane, namespace, time_server)
    catalog = KubernetesToolCatalog(api_client, namespace, watch_timeout_s=30)
    await catalog.open()
    try:
        assert catalog.get_tool("get_current_time") is None  # not discovered yet: nothing served
        verdict = catalog.server_verdicts()["time"]
        assert not verdict.discovered and verdict.served == ()
        clash = {**GET_TIME, "name": "divide"}  # an McpTool of examples/tools declares `divide`
        status = _discovered([GET_TIME, clash])
        control_plane.kubectl(
            "patch", "-n", namespace, "mcpserver/time", "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": status}),
        )  # fmt: skip
        served = await until(lambda: catalog.get_tool("get_current_time"))
        assert isinstance(served, ServerToolSpec)
        assert served.tool.input_schema == GET_TIME["inputSchema"]  # verbatim, in its own dialect
        assert served.listed == GET_TIME and served.execution.idempotent  # readOnlyHint: a re-run is safe
        assert served.server_tool_name == "get_current_time"
        assert "get_current_time" in [tool.name for tool in catalog.list_tools()]
        divide = catalog.get_tool("divide")
        assert divide is not None and not isinstance(divide, ServerToolSpec)  # the McpTool keeps its name
        verdict = catalog.server_verdicts()["time"]
        assert verdict.discovered and verdict.served == ("get_current_time",)
        (refusal,) = verdict.refusals
        assert f"mcpserver/time in namespace {namespace}" in refusal and "'divide'" in refusal
        assert f"mcptool/divide in namespace {namespace}" in refusal  # both sides named
        # spec.warm: no warm server pods on Kubernetes yet, so its tools run per call (never wait for workers)
        _apply(control_plane, namespace, {**time_server, "spec": {**time_server["spec"], "warm": {"minWorkers": 1}}})
        await until(lambda: catalog.server_verdicts()["time"].generation == 2)
        warm = catalog.get_tool("get_current_time")
        assert warm is not None and warm.warm is None
        control_plane.kubectl("delete", "-n", namespace, "mcpserver/time")
        await until(lambda: catalog.get_tool("get_current_time") is None)
    finally:
        await catalog.aclose()


def test_the_api_server_accepts_the_per_call_job_with_its_native_sidecar(
    control_plane: ControlPlane, namespace: str
) -> None:
    """The Job of `operator/server_jobs.py`, validated by the real API server (server-side dry run): the native
    sidecar (`restartPolicy: Always` on an init container), the FIFO volume, the probes and the shapes."""
    task = {
        "apiVersion": "mcptasks.io/v1alpha1",
        "kind": "McpTask",
        "metadata": {"name": "c" * 32, "namespace": namespace, "uid": "u-3", "labels": {}},
    }
    settings = OperatorSettings(worker_url="http://op:8081/", bridge_image="registry.example/mcp-tasks:1")
    for transport, extra in (("stdio", {}), ("streamable-http", {"http": {"port": 3001, "path": "/mcp"}})):
        document = json.loads(json.dumps(EVERYTHING))
        document["spec"] = {**document["spec"], "transport": transport, **extra}
        server = parse_server_manifest(document, "mcpserver/everything")
        listed = {"name": "echo", "inputSchema": {"type": "object"}}
        discovery = Discovery(protocol_version="2025-11-25", server_info={"name": "e"}, tools=(listed,))
        (tool,), _ = tool_specs(server, discovery, ("python", "-m", "mcp_tasks.bridge"))
        job = build_server_job(task, tool, settings)
        created = json.loads(
            control_plane.kubectl(
                "create", "--dry-run=server", "-n", namespace, "-o", "json", "-f", "-", input_text=json.dumps(job)
            )
        )
        pod = created["spec"]["template"]["spec"]
        assert pod["initContainers"][-1]["restartPolicy"] == "Always", transport
        assert [c["name"] for c in pod["containers"]] == ["tool"]


BRIDGE_IMAGE = "localhost/mcp-tasks/mcp-tasks:dev"
"""The project's image, as the process node knows it (`python` is this machine's, with mcp_tasks)."""


def server_status(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(plane.kubectl("get", "-n", namespace, f"mcpserver/{name}", "-o", "json"))
    return found.get("status") or {}


def condition(status: dict[str, Any], kind: str) -> str | None:
    return next((c["status"] for c in status.get("conditions") or [] if c.get("type") == kind), None)


async def test_a_stdio_server_is_discovered_in_a_pod_and_its_tool_runs_per_call_as_a_job(
    control_plane: ControlPlane,
    namespace: str,
    operators: Operators,
    gateways: Gateways,
    http_session: aiohttp.ClientSession,
) -> None:
    """mcp-server-time (PyPI, stdio, nobody here wrote it): discovery runs in a Job of the call's shape (the
    server as a native sidecar behind FIFOs, the bridge reporting to the worker API with its pod's token), the
    status shows what it listed, and `get_current_time` runs as a task in a Job of its own."""
    command = time_command()
    operators.start(env={"MCPTASKS_BRIDGE_IMAGE": BRIDGE_IMAGE})
    time_server = {
        "apiVersion": "mcptasks.io/v1alpha1",
        "kind": "McpServer",
        "metadata": {"name": "time"},
        "spec": {
            "transport": "stdio",
            "container": {"image": "registry.example/mcp/time:2026.10.19", "command": command},
        },
    }
    _apply(control_plane, namespace, time_server)
    status = await until(
        lambda: (s := server_status(control_plane, namespace, "time")) and condition(s, "Ready") == "True" and s,
        timeout_s=90,
    )
    assert condition(status, "Discovered") == "True" and status["observedGeneration"] == 1
    assert status["serverInfo"]["name"] == "mcp-time" and status["protocolVersion"]
    assert {tool["name"] for tool in status["tools"]} >= {"get_current_time", "convert_time"}
    assert status["toolCount"] == len(status["tools"]) and "lastError" not in status
    table = control_plane.kubectl("get", "-n", namespace, "mcpservers").splitlines()
    assert table[1].split()[:4] == ["time", "stdio", str(status["toolCount"]), "True"], table
    mcp = client(http_session, await gateways.start())
    task_id = await mcp.start_task("get_current_time", {"timezone": "Europe/Paris"})
    done = await mcp.wait_status(task_id, "completed", "failed", timeout_s=90)
    assert done["status"] == "completed" and not done["result"].get("isError"), done
    assert "Europe/Paris" in done["result"]["content"][0]["text"]
    jobs = json.loads(
        control_plane.kubectl("get", "-n", namespace, "jobs", "-l", f"mcptasks.io/task-id={task_id}", "-o", "json")
    )["items"]
    (job,) = jobs
    pod = job["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["initContainers"]] == ["fifos", "server"]
    assert pod["initContainers"][1]["image"] == "registry.example/mcp/time:2026.10.19"


async def test_server_everything_long_operation_elicitation_cancel_and_an_operator_kill_on_kubernetes(
    control_plane: ControlPlane,
    namespace: str,
    operators: Operators,
    gateways: Gateways,
    http_session: aiohttp.ClientSession,
) -> None:
    """@modelcontextprotocol/server-everything (npm, stdio) per call: the long-running operation shows its
    progress in `tasks/get` and completes with the server's text although the operator is killed (SIGKILL)
    mid-operation and another starts; the elicitation goes `input_required` and completes after `tasks/update`;
    a cancelled long operation ends `cancelled` and its Job and pod go."""
    first = operators.start(env={"MCPTASKS_BRIDGE_IMAGE": BRIDGE_IMAGE})
    everything = {
        "apiVersion": "mcptasks.io/v1alpha1",
        "kind": "McpServer",
        "metadata": {"name": "everything"},
        "spec": {
            "transport": "stdio",
            "container": {"image": "registry.example/mcp/everything:2026.8.31", "command": everything_command()},
            "toolDefaults": {"execution": {"cancelGraceSeconds": 2}},
        },
    }
    _apply(control_plane, namespace, everything)
    await until(lambda: condition(server_status(control_plane, namespace, "everything"), "Ready") == "True", 90)
    mcp = client(http_session, await gateways.start())

    long = await mcp.start_task("trigger-long-running-operation", {"duration": 8, "steps": 8})
    running = await mcp.wait_task(long, lambda t: "of 8" in t.get("statusMessage", ""), timeout_s=60)
    assert running["status"] == "working"  # the server's notifications/progress, through the bridge
    operators.kill(first)
    operators.start(env={"MCPTASKS_BRIDGE_IMAGE": BRIDGE_IMAGE})
    done = await mcp.wait_status(long, "completed", "failed", timeout_s=60)
    assert done["status"] == "completed", done
    assert done["result"]["content"] == [
        {"type": "text", "text": "Long running operation completed. Duration: 8 seconds, Steps: 8."}
    ]
    jobs = control_plane.kubectl("get", "-n", namespace, "jobs", "-l", f"mcptasks.io/task-id={long}", "-o", "name")
    assert len(jobs.split()) == 1, jobs  # the new operator adopted the run: no second Job

    asking = await mcp.start_task("trigger-elicitation-request", {})
    asked = await mcp.wait_status(asking, "input_required", timeout_s=60)
    ((key, request),) = asked["inputRequests"].items()
    assert request["method"] == "elicitation/create"
    await mcp.update(asking, {key: {"action": "accept", "content": {"name": "Ada Lovelace", "check": True}}})
    answered = await mcp.wait_status(asking, "completed", "failed", timeout_s=60)
    assert "Name: Ada Lovelace" in "".join(block["text"] for block in answered["result"]["content"]), answered

    cancelled = await mcp.start_task("trigger-long-running-operation", {"duration": 60, "steps": 60})
    await mcp.wait_task(cancelled, lambda t: "of 60" in t.get("statusMessage", ""), timeout_s=60)
    await mcp.cancel(cancelled)
    ended = await mcp.wait_status(cancelled, "cancelled", "completed", "failed", timeout_s=60)
    assert ended["status"] == "cancelled", ended
    selector = f"mcptasks.io/task-id={cancelled}"
    await until(lambda: not control_plane.kubectl("get", "-n", namespace, "pods", "-l", selector, "-o", "name"))


async def test_a_streamable_http_server_is_reached_on_the_pods_loopback(
    control_plane: ControlPlane,
    namespace: str,
    operators: Operators,
    gateways: Gateways,
    http_session: aiohttp.ClientSession,
) -> None:
    """server-everything over Streamable HTTP: the sidecar listens on `http.port`, its startup probe holds the
    bridge back until it does, and discovery and a call reach it at 127.0.0.1 inside the pod."""
    port = free_port()
    operators.start(env={"MCPTASKS_BRIDGE_IMAGE": BRIDGE_IMAGE})
    everything = {
        "apiVersion": "mcptasks.io/v1alpha1",
        "kind": "McpServer",
        "metadata": {"name": "everything-http"},
        "spec": {
            "transport": "streamable-http",
            "http": {"port": port, "path": "/mcp"},
            "toolNamePrefix": "http-",
            "container": {
                "image": "registry.example/mcp/everything:2026.8.31",
                "command": everything_command("streamableHttp"),
                "env": [{"name": "PORT", "value": str(port)}],
            },
        },
    }
    _apply(control_plane, namespace, everything)
    status = await until(
        lambda: (s := server_status(control_plane, namespace, "everything-http")) and condition(s, "Ready") == "True"
        and s,
        timeout_s=90,
    )  # fmt: skip
    assert "http-get-sum" in status["servedTools"]
    mcp = client(http_session, await gateways.start())
    summed = await mcp.wait_status(await mcp.start_task("http-get-sum", {"a": 1, "b": 41}), "completed", "failed")
    assert summed["result"]["content"][0]["text"] == "The sum of 1 and 41 is 42.", summed


async def test_a_server_that_cannot_start_says_why_and_a_fixed_spec_is_discovered_again(
    control_plane: ControlPlane,
    namespace: str,
    operators: Operators,
    http_session: aiohttp.ClientSession,
) -> None:
    """A server whose command fails: `Discovered` False with the bridge's reason in `lastError`, `Ready` False,
    no tool served. The spec fixed (generation 2): discovered again without waiting for the retry interval.
    A report without a discovery pod's token is refused like an unknown path."""
    operator = operators.start(env={"MCPTASKS_BRIDGE_IMAGE": BRIDGE_IMAGE})
    container: dict[str, Any] = {"image": "registry.example/mcp/time:1", "command": ["/nonexistent/mcp-server-time"]}
    broken: dict[str, Any] = {
        "apiVersion": "mcptasks.io/v1alpha1",
        "kind": "McpServer",
        "metadata": {"name": "time"},
        "spec": {"container": container},
    }
    _apply(control_plane, namespace, broken)
    status = await until(lambda: (s := server_status(control_plane, namespace, "time")).get("lastError") and s, 90)
    assert condition(status, "Discovered") == "False" and condition(status, "Ready") == "False"
    assert "discovery exited with code" in status["lastError"], status["lastError"]
    assert status.get("toolCount", 0) == 0
    report = {"result": {"content": [], "structuredContent": {"protocolVersion": "x", "serverInfo": {}, "tools": []}}}
    url = f"http://127.0.0.1:{operators.port}/v1/discoveries/time/result"
    for headers in ({}, {"Authorization": "Bearer not-a-pod-token"}):
        async with http_session.post(url, json=report, headers=headers) as refused:
            assert refused.status == 404
    fixed = {**broken, "spec": {"container": {**container, "command": time_command()}}}
    _apply(control_plane, namespace, fixed)
    status = await until(
        lambda: (s := server_status(control_plane, namespace, "time")) and condition(s, "Ready") == "True" and s, 90
    )
    assert status["observedGeneration"] == 2 and "lastError" not in status and status["toolCount"] >= 2
    assert operator.poll() is None
