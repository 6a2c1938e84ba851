"""Warm tools on the real control plane: the operator runs a Deployment and a Service per warm McpTool
(the process node runs its pods as local processes, with readiness probes), and the gateway sends
synchronous calls straight to the ready workers: no McpTask, no Job, no API write, asserted by watching."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from kubernetes_asyncio import watch
from kubernetes_asyncio.client import ApiClient, BatchV1Api, CustomObjectsApi

from mcp_tasks.store.kubernetes.resources import GROUP, TASK_PLURAL, VERSION
from tests.conftest import PLAIN_CAPS, REPO
from tests.controlplane.cluster import ControlPlane, local_tool_manifests
from tests.kube.conftest import Gateways, Operators, client, until
from tests.tls import apply_tls_secret, issue

WAIT_S = 60.0
FORM_CAPS: dict[str, Any] = {"elicitation": {}}


def kube_json(plane: ControlPlane, namespace: str, *what: str) -> Any:
    return json.loads(plane.kubectl("get", *what, "-n", namespace, "-o", "json"))


def apply_warm(plane: ControlPlane, namespace: str, *names: str) -> None:
    """Apply the named McpTools of tests/tools and examples/tools with their `spec.warm`."""
    documents = [
        document
        for document in local_tool_manifests([REPO / "tests" / "tools", REPO / "examples" / "tools"])
        if document["metadata"]["name"] in names
    ]
    assert len(documents) == len(names)
    plane.kubectl("apply", "-n", namespace, "-f", "-", input_text=yaml.safe_dump_all(documents))


def endpoints(plane: ControlPlane, namespace: str, mcptool: str) -> list[str]:
    status = kube_json(plane, namespace, "mcptool", mcptool).get("status") or {}
    return list((status.get("warm") or {}).get("endpoints") or [])


def exists(plane: ControlPlane, namespace: str, *what: str) -> bool:
    return bool(plane.kubectl("get", *what, "-n", namespace, "--ignore-not-found", "-o", "name").strip())


@pytest.fixture
async def warm_namespace(control_plane: ControlPlane, namespace: str) -> AsyncIterator[str]:
    """The test's namespace, deleted afterwards so that the process node stops its warm workers."""
    try:
        yield namespace
    finally:
        control_plane.kubectl("delete", "namespace", namespace, "--wait=false")


async def test_the_operator_runs_a_warm_tools_workers_and_follows_its_mcptool(
    operators: Operators, control_plane: ControlPlane, warm_namespace: str
) -> None:
    """Deployment + Service owned by the McpTool, updated on edit, an HPA with `autoscaling`, all gone
    when the McpTool stops being warm; `status.warm` lists the ready pods."""
    namespace = warm_namespace
    apply_warm(control_plane, namespace, "warm-echo")
    operators.start()
    await until(lambda: len(endpoints(control_plane, namespace, "warm-echo")) == 1)
    deployment = kube_json(control_plane, namespace, "deployment", "mcptool-warm-echo")
    (owner,) = deployment["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("McpTool", "warm-echo", True)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {item["name"]: item["value"] for item in container["env"]}
    assert env["MCPTASKS_SERVE_CONCURRENCY"] == "2" and container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert deployment["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    service = kube_json(control_plane, namespace, "service", "mcptool-warm-echo")
    assert service["spec"]["ports"][0]["targetPort"] == "calls"
    status = kube_json(control_plane, namespace, "mcptool", "warm-echo")["status"]["warm"]
    assert status["readyWorkers"] == 1 and status["service"] == f"mcptool-warm-echo.{namespace}.svc:8080"

    patch = {"spec": {"warm": {"concurrency": 3, "autoscaling": {"targetCPUUtilizationPercentage": 50}}}}
    control_plane.kubectl("patch", "mcptool", "warm-echo", "-n", namespace, "--type=merge", "-p", json.dumps(patch))

    def concurrency() -> str:
        found = kube_json(control_plane, namespace, "deployment", "mcptool-warm-echo")
        (tool,) = found["spec"]["template"]["spec"]["containers"]
        return str({item["name"]: item["value"] for item in tool["env"]}["MCPTASKS_SERVE_CONCURRENCY"])

    await until(lambda: concurrency() == "3" and exists(control_plane, namespace, "hpa", "mcptool-warm-echo"))
    hpa = kube_json(control_plane, namespace, "hpa", "mcptool-warm-echo")
    assert hpa["spec"]["maxReplicas"] == 2 and hpa["spec"]["scaleTargetRef"]["name"] == "mcptool-warm-echo"

    control_plane.kubectl(
        "patch", "mcptool", "warm-echo", "-n", namespace, "--type=json", "-p", '[{"op":"remove","path":"/spec/warm"}]'
    )
    await until(
        lambda: (
            not any(
                exists(control_plane, namespace, kind, "mcptool-warm-echo") for kind in ("deployment", "service", "hpa")
            )
        )
    )


async def watch_writes(api: ApiClient, namespace: str, seen: list[str], started: asyncio.Event) -> None:
    """Record every McpTask and Job event in `namespace` (a write of either shows up here)."""
    objects, jobs = CustomObjectsApi(api), BatchV1Api(api)

    async def follow(list_call: Any, *args: Any) -> None:
        listed = api.sanitize_for_serialization(await list_call(*args))
        version = listed["metadata"]["resourceVersion"]
        async with watch.Watch().stream(list_call, *args, resource_version=version, timeout_seconds=120) as stream:
            ready.append(True)
            if len(ready) == 2:
                started.set()
            async for event in stream:
                seen.append(f"{event['type']} {list_call.__name__}")

    ready: list[bool] = []
    await asyncio.gather(
        follow(objects.list_namespaced_custom_object, GROUP, VERSION, namespace, TASK_PLURAL),
        follow(jobs.list_namespaced_job, namespace),
    )


async def test_synchronous_calls_reach_the_warm_workers_without_an_api_write(
    operators: Operators,
    gateways: Gateways,
    control_plane: ControlPlane,
    warm_namespace: str,
    api_client: ApiClient,
    http_session: aiohttp.ClientSession,
) -> None:
    namespace = warm_namespace
    apply_warm(control_plane, namespace, "warm-echo", "word-stats")
    operators.start()
    gateway = await gateways.start()
    catalog: Any = gateway.services.catalog
    await until(lambda: bool(catalog.warm_endpoints("warm_echo") and catalog.warm_endpoints("word_stats")))
    seen: list[str] = []
    started = asyncio.Event()
    watcher = asyncio.create_task(watch_writes(api_client, namespace, seen, started))
    try:
        await asyncio.wait_for(started.wait(), 10)
        mcp = client(http_session, gateway)
        replies = [(await mcp.call_tool("warm_echo", {"text": f"n{i}"}, caps=PLAIN_CAPS)).result for i in range(5)]
        stats = (await mcp.call_tool("word_stats", {"text": "a b a"})).result
        # Stays: no event says "no write is coming"; a second lets any write the calls made reach the watch. (A
        # fence would need a write to both watched kinds that the operator then acts on.)
        await asyncio.sleep(1.0)
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
    texts = [reply["content"][0]["text"] for reply in replies]
    assert [text.split()[0] for text in texts] == [f"n{i}" for i in range(5)]
    assert len({text.split("pid=")[1].split()[0] for text in texts}) == 1, "one warm process served them all"
    assert stats["structuredContent"]["words"] == 3
    assert seen == [], f"synchronous warm calls wrote to the API: {seen}"
    assert kube_json(control_plane, namespace, "mcptasks")["items"] == []


def worker_pids(control_plane: ControlPlane, namespace: str, tool: str) -> list[int]:
    """Local processes of `tools.py <tool>` run by a pod of `namespace` (the process node runs pods as local
    processes, `HOSTNAME` their pod's name). Not another namespace's pods, which a deleted namespace may keep
    a while, nor the embedded tests' workers, which run beside these under `pytest -n 2`."""
    pods = {
        f"HOSTNAME={name}".encode()
        for name in control_plane.kubectl(
            "get", "pods", "-n", namespace, "-o", "jsonpath={.items[*].metadata.name}"
        ).split()
    }
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            environ = set((entry / "environ").read_bytes().split(b"\0"))
        except OSError:
            continue
        if b"tools.py" in argv and tool.encode() in argv and environ & pods:
            found.append(int(entry.name))
    return found


async def test_a_warm_worker_killed_mid_call_and_input_on_a_warm_tool(
    operators: Operators,
    gateways: Gateways,
    control_plane: ControlPlane,
    warm_namespace: str,
    http_session: aiohttp.ClientSession,
    tmp_path: Path,
) -> None:
    """A worker killed mid-call: that call ends with a tool error, the Deployment replaces the pod and
    the next call is served. A call that asks for input: an idempotent tool continues as a hidden task
    in input rounds, another one gets an error saying why."""
    namespace = warm_namespace
    apply_warm(control_plane, namespace, "warm-sleeper", "warm-asker", "warm-asker-idempotent")
    operators.start()
    gateway = await gateways.start()
    catalog: Any = gateway.services.catalog
    tools = ("warm_sleeper", "warm_asker", "warm_asker_idempotent")
    await until(lambda: all(catalog.warm_endpoints(tool) for tool in tools))
    mcp = client(http_session, gateway)

    started = tmp_path / "started"
    arguments = {"seconds": 20, "started": str(started)}
    call = asyncio.create_task(mcp.call_tool("warm_sleeper", arguments, caps=PLAIN_CAPS), name="call")
    await until(started.exists)  # the call is in flight on that worker
    (pid,) = worker_pids(control_plane, namespace, "warm_sleeper")
    os.kill(pid, signal.SIGKILL)
    lost = (await call).result
    text = lost["content"][0]["text"]
    # the one rule of every executor (docs/tool-runtime.md §7): its side effect may have happened
    assert lost["isError"] is True and "lost mid-call" in text and "outcome is unknown" in text, text
    assert "call again" not in text.replace("before calling it again", ""), text
    await until(
        lambda: (
            bool(catalog.warm_endpoints("warm_sleeper"))
            and worker_pids(control_plane, namespace, "warm_sleeper") not in ([], [pid])
        )
    )
    again = (await mcp.call_tool("warm_sleeper", {"seconds": 0}, caps=PLAIN_CAPS)).result
    assert again["content"][0]["text"].startswith("slept on attempt 1")

    refused = (await mcp.call_tool("warm_asker", {}, caps=FORM_CAPS)).result
    assert refused["isError"] is True and "not declared idempotent" in refused["content"][0]["text"]

    first = (await mcp.call_tool("warm_asker_idempotent", {}, caps=FORM_CAPS)).result
    assert first["resultType"] == "input_required", first
    (key,) = first["inputRequests"]
    answer = {key: {"action": "accept", "content": {"word": "kube"}}}
    done = (
        await mcp.call_tool(
            "warm_asker_idempotent",
            {},
            caps=FORM_CAPS,
            extra={"inputResponses": answer, "requestState": first["requestState"]},
        )
    ).result
    assert done["content"][0]["text"] == "worked on kube"


async def test_tasks_of_a_warm_tool_run_on_its_pods_under_the_lease(
    operators: Operators,
    gateways: Gateways,
    control_plane: ControlPlane,
    warm_namespace: str,
    http_session: aiohttp.ClientSession,
) -> None:
    """No Job: the operator's warm runner claims the McpTask (`status.lease`), runs it on the warm pod,
    asks its input through the worker API, and stops it on `tasks/cancel`."""
    namespace = warm_namespace
    apply_warm(control_plane, namespace, "warm-echo", "warm-sleeper", "warm-asker")
    operators.start()
    gateway = await gateways.start()
    catalog: Any = gateway.services.catalog
    await until(lambda: all(catalog.warm_endpoints(tool) for tool in ("warm_echo", "warm_sleeper", "warm_asker")))
    mcp = client(http_session, gateway)

    sync_pid = (await mcp.call_tool("warm_echo", {"text": "s"}, caps=PLAIN_CAPS)).result["content"][0]["text"]
    task_id = await mcp.start_task("warm_echo", {"text": "t", "steps": 1})
    done = await mcp.wait_status(task_id, "completed", "failed", timeout_s=WAIT_S)
    assert done["status"] == "completed", done
    text = done["result"]["content"][0]["text"]
    assert "task=True" in text and text.split("pid=")[1].split()[0] == sync_pid.split("pid=")[1].split()[0]
    assert kube_json(control_plane, namespace, "mcptask", task_id)["status"]["attempt"] == 1

    sleeping = await mcp.start_task("warm_sleeper", {"seconds": 60})
    await mcp.wait_task(sleeping, lambda t: "pid" in t.get("statusMessage", ""), timeout_s=WAIT_S)
    assert kube_json(control_plane, namespace, "mcptask", sleeping)["status"]["lease"]["holder"]
    await mcp.cancel(sleeping)
    cancelled = await mcp.wait_status(sleeping, "cancelled", "completed", "failed", timeout_s=WAIT_S)
    assert cancelled["status"] == "cancelled"

    asking = await mcp.start_task("warm_asker", {"seconds": 0})
    waiting = await mcp.wait_status(asking, "input_required", timeout_s=WAIT_S)
    (key,) = waiting["inputRequests"]
    await mcp.update(asking, {key: {"action": "accept", "content": {"word": "warm"}}})
    answered = await mcp.wait_status(asking, "completed", "failed", timeout_s=WAIT_S)
    assert answered["result"]["content"][0]["text"] == "worked on warm"
    assert kube_json(control_plane, namespace, "jobs")["items"] == [], "no task of a warm tool got a Job"


async def test_a_task_running_as_a_job_stays_the_jobs_when_its_tool_becomes_warm(
    operators: Operators,
    gateways: Gateways,
    control_plane: ControlPlane,
    warm_namespace: str,
    http_session: aiohttp.ClientSession,
) -> None:
    """warm-sleeper without `spec.warm` runs its task as a Job; made warm, and the operator restarted (its
    copies of Jobs empty), the task must not be claimed by the warm runner and run a second time."""
    namespace = warm_namespace
    first = operators.start()
    gateway = await gateways.start()
    mcp = client(http_session, gateway)
    task_id = await mcp.start_task("warm_sleeper", {"seconds": 12})
    await mcp.wait_task(task_id, lambda t: "pid" in t.get("statusMessage", ""), timeout_s=WAIT_S)
    assert kube_json(control_plane, namespace, "jobs")["items"], "it runs as a Job"
    apply_warm(control_plane, namespace, "warm-sleeper")
    operators.kill(first)
    operators.start()
    catalog: Any = gateway.services.catalog
    await until(lambda: bool(catalog.warm_endpoints("warm_sleeper")))
    for _ in range(2):  # later tasks run warm: the new operator's warm runner has made claim passes since
        later = await mcp.start_task("warm_sleeper", {"seconds": 0})
        assert (await mcp.wait_status(later, "completed", "failed", timeout_s=WAIT_S))["status"] == "completed"
    status = kube_json(control_plane, namespace, "mcptask", task_id)["status"]
    assert status["attempt"] == 1 and "lease" not in status, status
    done = await mcp.wait_status(task_id, "completed", "failed", timeout_s=WAIT_S)
    assert done["result"]["content"][0]["text"].startswith("slept on attempt 1"), done


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
async def test_a_warm_task_in_flight_outlives_its_operator_and_is_adopted(
    gateways: Gateways,
    operators: Operators,
    control_plane: ControlPlane,
    warm_namespace: str,
    http_session: aiohttp.ClientSession,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    tls: bool,
) -> None:
    """Restart rule (ours, docs/design.md §7), as in the embedded server: a warm call in flight when its
    operator replica is killed runs on in its pod; the next replica re-attaches to it from `status.lease.call`,
    so a tool that is not idempotent ends `completed` by its one run. With `tls`, the pods serve HTTPS
    (`tls.warmWorkers`) and the re-attach goes over it too."""
    namespace = warm_namespace
    gateway_tls: dict[str, Any] = {}
    if tls:
        pem = issue(["mcp-tasks-warm-worker"], "warm CA")
        ca = pem.write(tmp_path / "warm-tls")[2]
        apply_tls_secret(control_plane, namespace, "warm-tls", pem)
        monkeypatch.setenv("MCPTASKS_WARM_TLS_SECRET", "warm-tls")
        monkeypatch.setenv("MCPTASKS_WARM_TLS_CA_FILE", str(ca))
        gateway_tls["warm_tls_ca_file"] = ca
    apply_warm(control_plane, namespace, "warm-sleeper")
    first = operators.start()
    gateway = await gateways.start(**gateway_tls)
    catalog: Any = gateway.services.catalog
    await until(lambda: bool(catalog.warm_endpoints("warm_sleeper")))
    mcp = client(http_session, gateway)
    task_id = await mcp.start_task("warm_sleeper", {"seconds": 6})
    await mcp.wait_task(task_id, lambda task: bool(task.get("statusMessage")), timeout_s=WAIT_S)
    (pid,) = worker_pids(control_plane, namespace, "warm_sleeper")
    stored = kube_json(control_plane, namespace, "mcptask", task_id)
    assert stored["status"]["lease"]["call"]["executionId"] == f"{task_id}.1", stored["status"]
    operators.kill(first)
    operators.start()
    done = await mcp.wait_status(task_id, "completed", "failed", "cancelled", timeout_s=WAIT_S)
    assert done["status"] == "completed", done
    assert done["result"]["content"][0]["text"] == f"slept on attempt 1 in pid {pid}", "the same run, not a second"
