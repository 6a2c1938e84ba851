"""The per-call Job of an McpServer tool (`operator/server_jobs.py`): the unmodified server image as a native
sidecar, the bridge as the Job's container, the worker token in the bridge alone (docs/mcp-servers.md)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from mcp_tasks.operator.server_jobs import BRIDGE_RELAY, SERVER_REDIRECT, build_server_job
from mcp_tasks.operator.settings import OperatorSettings
from mcp_tasks.operator.warm import build_deployment, build_service, server_warm_name
from mcp_tasks.tasks.servers import Discovery, ServerToolSpec, parse_server_manifest, tool_specs
from mcp_tasks.worker.warm_auth import WarmCallSigner, new_private_pem

TASK: dict[str, Any] = {
    "apiVersion": "mcptasks.io/v1alpha1",
    "kind": "McpTask",
    "metadata": {"name": "b" * 32, "namespace": "ns", "uid": "u-2", "labels": {"mcptasks.io/tool": "echo"}},
}
SETTINGS = OperatorSettings(worker_url="http://op:8081/", bridge_image="registry.example/mcp-tasks:1")
SECRET_ENV = {"name": "API_KEY", "valueFrom": {"secretKeyRef": {"name": "server-keys", "key": "api"}}}


def server_tool(transport: str = "stdio", **spec: Any) -> ServerToolSpec:
    document = {
        "apiVersion": "mcptasks.io/v1alpha1",
        "kind": "McpServer",
        "metadata": {"name": "everything"},
        "spec": {
            "transport": transport,
            "container": {
                "image": "registry.example/node/server-everything:2026.8.31",
                "command": ["mcp-server-everything", "stdio" if transport == "stdio" else "streamableHttp"],
                "env": [{"name": "LOG_LEVEL", "value": "debug"}, SECRET_ENV],
                "resources": {"limits": {"memory": "512Mi"}},
            },
            **spec,
        },
    }
    server = parse_server_manifest(document, "mcpserver/everything")
    listed = {"name": "echo", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}}
    discovery = Discovery(protocol_version="2025-11-25", server_info={"name": "everything"}, tools=(listed,))
    (spec_,), refusals = tool_specs(server, discovery, ("python", "-m", "mcp_tasks.bridge"))
    assert not refusals
    return spec_


def pod_of(job: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = job["spec"]["template"]["spec"]
    return pod


def test_a_stdio_call_runs_the_server_image_unmodified_beside_the_bridge_through_fifos() -> None:
    declared = ["mcp-server-everything", "stdio"]
    job = build_server_job(TASK, server_tool(), SETTINGS)
    assert job["metadata"]["name"] == "mcptask-" + "b" * 32 and job["spec"]["backoffLimit"] > 0  # readOnlyHint
    pod = pod_of(job)
    fifos, server = pod["initContainers"]
    (bridge,) = pod["containers"]
    assert server["restartPolicy"] == "Always"  # a native sidecar: the Job completes when the bridge exits
    assert server["image"] == "registry.example/node/server-everything:2026.8.31"  # nothing installed in it
    fifo_in, fifo_out = "/run/mcp-server/in", "/run/mcp-server/out"
    assert server["command"] == ["sh", "-c", SERVER_REDIRECT, "mcp-server-everything", fifo_in, fifo_out, *declared]
    assert bridge["workingDir"] == "/run/mcp-server"  # where the relay finds the FIFOs
    assert fifos["image"] == bridge["image"] == "registry.example/mcp-tasks:1"
    assert bridge["command"] == ["python", "-m", "mcp_tasks.bridge"]
    target = json.loads(next(v["value"] for v in bridge["env"] if v["name"] == "MCPTASKS_BRIDGE_SERVER"))
    assert target["command"] == ["sh", "-c", BRIDGE_RELAY] and target["env"] == {}
    bridge_env = {v["name"]: v for v in bridge["env"]}
    assert bridge_env["MCPTASKS_BRIDGE_TOOL"]["value"] == "echo"
    assert bridge_env["MCPTASKS_BRIDGE_IDEMPOTENT"]["value"] == "true"
    assert "API_KEY" not in bridge_env and "LOG_LEVEL" not in bridge_env  # the server's Secrets stay its own
    assert SECRET_ENV in server["env"] and {"name": "LOG_LEVEL", "value": "debug"} in server["env"]
    server_env = {v["name"] for v in server["env"]}
    assert not any(name.startswith("MCPTASKS_") for name in server_env)  # no worker URL, no token file
    assert {m["name"] for m in server["volumeMounts"]} == {"mcptasks-server-tmp", "mcptasks-stdio"}
    assert "worker-token" in {m["name"] for m in bridge["volumeMounts"]}  # the token: the bridge's alone
    assert server["resources"] == {"limits": {"memory": "512Mi"}}
    for ours in (fifos, bridge):  # a namespace whose quota names cpu and memory admits them
        assert set(ours["resources"]["requests"]) == set(ours["resources"]["limits"]) == {"cpu", "memory"}
    for container in (fifos, server, bridge):
        context = container["securityContext"]
        assert context["readOnlyRootFilesystem"] and not context["allowPrivilegeEscalation"]
        assert context["capabilities"] == {"drop": ["ALL"]} and context["runAsNonRoot"]
    assert pod["automountServiceAccountToken"] is False and pod["restartPolicy"] == "Never"


def test_a_streamable_http_call_reaches_the_server_on_the_pods_loopback_once_it_listens() -> None:
    job = build_server_job(TASK, server_tool("streamable-http", http={"port": 3001, "path": "/mcp"}), SETTINGS)
    pod = pod_of(job)
    (server,) = pod["initContainers"]  # no FIFOs
    assert server["command"] == ["mcp-server-everything", "streamableHttp"]
    assert server["startupProbe"]["tcpSocket"] == {"port": 3001}  # the bridge starts once it listens
    bridge_env = {v["name"]: v.get("value") for v in pod["containers"][0]["env"]}
    target = json.loads(bridge_env["MCPTASKS_BRIDGE_SERVER"] or "")
    assert target["http"]["url"] == "http://127.0.0.1:3001/mcp" and target["command"] is None


def test_without_the_bridge_image_the_job_is_refused_naming_the_setting() -> None:
    with pytest.raises(ValueError, match="MCPTASKS_BRIDGE_IMAGE"):
        build_server_job(TASK, server_tool(), OperatorSettings())


def test_the_two_scripts_join_a_stdio_server_to_its_bridge_through_fifos(tmp_path: Path) -> None:
    """The sidecar's and the bridge's `sh -c` scripts, run here with FIFOs as the pod has them: a line the
    bridge side writes reaches the server's stdin, the server's answer comes back, and the server exits
    when the bridge closes its side (the end of a call)."""
    fifo_dir = tmp_path / "run"
    fifo_dir.mkdir()
    for name in ("in", "out"):
        subprocess.run(["mkfifo", "-m", "0600", str(fifo_dir / name)], check=True)
    # an "unmodified server": answers each line with a line, exits at end of input
    fifos = [str(fifo_dir / "in"), str(fifo_dir / "out")]
    server = subprocess.Popen(["sh", "-c", SERVER_REDIRECT, "sed", *fifos, "sed", "-u", "s/ping/pong/"])
    relay = subprocess.Popen(["sh", "-c", BRIDGE_RELAY], cwd=fifo_dir, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert relay.stdin is not None and relay.stdout is not None
    relay.stdin.write(b'{"jsonrpc":"2.0","method":"ping"}\n')
    relay.stdin.flush()
    assert relay.stdout.readline() == b'{"jsonrpc":"2.0","method":"pong"}\n'
    relay.stdin.close()
    assert server.wait(timeout=10) == 0  # stdin's end reached the server
    assert relay.stdout.read() == b"" and relay.wait(timeout=10) == 0
    relay.stdout.close()


def test_a_warm_server_tools_deployment_has_the_per_call_pod_with_the_bridge_serving_warm_calls() -> None:
    """A warm McpServer's tool (docs/mcp-servers.md §6, our choice): its Deployment's pod is the per-call Job's
    (the server as a native sidecar behind FIFOs, the same restricted security context, the server's Secrets in
    the sidecar alone) with the bridge serving the warm-worker API; no worker token, no Kubernetes credentials;
    owned by the McpServer, selected by server and tool, named as a DNS label."""
    tool = server_tool(warm={"minWorkers": 2, "concurrency": 3, "resources": {"limits": {"memory": "1Gi"}}})
    server = {
        "apiVersion": "mcptasks.io/v1alpha1",
        "kind": "McpServer",
        "metadata": {"name": "everything", "namespace": "ns", "uid": "u-s"},
    }
    key = WarmCallSigner.from_pem(new_private_pem()).public_pem
    deployment = build_deployment(server, tool, "rel", key, bridge_image=SETTINGS.bridge_image)
    job_pod = pod_of(build_server_job(TASK, tool, SETTINGS))
    pod = deployment["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["initContainers"]] == ["fifos", "server"]
    fifos, sidecar = pod["initContainers"]
    assert fifos == job_pod["initContainers"][0]
    assert {**sidecar, "resources": None} == {**job_pod["initContainers"][1], "resources": None}
    assert sidecar["resources"] == {"limits": {"memory": "1Gi"}}  # warm.resources: the server's, which works
    (bridge,) = pod["containers"]
    assert bridge["image"] == SETTINGS.bridge_image and bridge["command"] == ["python", "-m", "mcp_tasks.bridge"]
    assert bridge["securityContext"] == job_pod["containers"][0]["securityContext"]
    assert pod["securityContext"] == job_pod["securityContext"] and pod["automountServiceAccountToken"] is False
    env = {v["name"]: v.get("value") for v in bridge["env"]}
    assert env["MCPTASKS_SERVE_TOOL"] == "echo" and env["MCPTASKS_SERVE_CONCURRENCY"] == "3"
    assert env["MCPTASKS_BRIDGE_TOOL"] == "echo" and env["MCPTASKS_BRIDGE_IDEMPOTENT"] == "true"
    assert env["MCPTASKS_BRIDGE_SERVER"] == next(
        v["value"] for v in job_pod["containers"][0]["env"] if v["name"] == "MCPTASKS_BRIDGE_SERVER"
    )
    assert "API_KEY" not in env and "LOG_LEVEL" not in env  # the server's Secrets stay the sidecar's
    assert not any(name.startswith("MCPTASKS_WORKER") for name in env)  # the worker API comes with each call
    assert {m["name"] for m in bridge["volumeMounts"]} == {"tmp", "mcptasks-stdio"}
    assert "worker-token" not in {v["name"] for v in pod["volumes"]}
    assert bridge["readinessProbe"]["httpGet"]["path"] == "/healthz" and deployment["spec"]["replicas"] == 2
    (owner,) = deployment["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("McpServer", "everything", "u-s")
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector == {
        "app.kubernetes.io/component": "warm-worker",
        "mcptasks.io/mcp-server": "everything",
        "mcptasks.io/tool": "echo",
    }
    assert build_service(server, tool, "rel")["spec"]["selector"] == selector
    assert deployment["metadata"]["name"] == "mcpserver-everything-echo"
    names = {server_warm_name("time", name) for name in ("get_current_time", "get-current-time", "Get", "x" * 80)}
    assert len(names) == 4 and all(len(n) <= 63 and re.match(r"^[a-z]([-a-z0-9]*[a-z0-9])?$", n) for n in names)
