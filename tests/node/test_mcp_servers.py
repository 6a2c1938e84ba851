"""Existing MCP servers as durable task tools on a real node (docs/mcp-servers.md §6): the unmodified server
image as a native sidecar beside the bridge, under a real kubelet and containerd, in a `restricted` namespace.

The images hold nothing of mcp-tasks (`tests/node/server_images.py`): server-everything in a Node-only image
(Debian minbase, no Python), mcp-server-time in a Python-only one. Both charts are installed for this module as
`test_release.py` installs them; every client call goes through `kubectl port-forward` to the gateway Service.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest
import yaml

from tests.conftest import PLAIN_CAPS, TASKS_CAPS, McpHttp, until
from tests.node import server_images
from tests.node.cluster import RealNode
from tests.node.test_release import RELEASE, TASK_WAIT_S, TOKEN, Release
from tests.node.test_release import release as release_fixture

release = release_fixture  # this module's own release (module scope), installed as test_release's

OPERATORS = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=operator"


@pytest.fixture(scope="module")
def servers(real_node: RealNode, release: Release, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    """The two server images imported into the node, and McpServers of them (mcp-server-time twice: per call,
    and warm), discovered and Ready."""
    server_images.build_and_import(real_node.containerd_socket, tmp_path_factory.mktemp("server-images"))
    declared = [
        {
            "apiVersion": "mcptasks.io/v1alpha1",
            "kind": "McpServer",
            "metadata": {"name": "everything"},
            "spec": {
                "transport": "stdio",
                "container": {
                    "image": server_images.EVERYTHING_IMAGE,
                    "command": ["/usr/local/bin/node", server_images.EVERYTHING_SCRIPT, "stdio"],
                },
                "toolDefaults": {"execution": {"cancelGraceSeconds": 2}},
            },
        },
        {
            "apiVersion": "mcptasks.io/v1alpha1",
            "kind": "McpServer",
            "metadata": {"name": "time"},
            "spec": {"container": {"image": server_images.TIME_IMAGE, "command": server_images.TIME_COMMAND}},
        },
        {
            "apiVersion": "mcptasks.io/v1alpha1",
            "kind": "McpServer",
            "metadata": {"name": "time-warm"},
            "spec": {
                "container": {"image": server_images.TIME_IMAGE, "command": server_images.TIME_COMMAND},
                "toolNamePrefix": "warm-",
                "tools": {"convert_time": {"expose": False}},
                "warm": {"minWorkers": 1},
            },
        },
    ]
    release.plane.kubectl("apply", "-n", release.namespace, "-f", "-", input_text=yaml.safe_dump_all(declared))

    def ready() -> bool:
        found = release.json("mcpservers")["items"]
        states = {
            s["metadata"]["name"]: next(
                (c["status"] for c in (s.get("status") or {}).get("conditions", []) if c["type"] == "Ready"), None
            )
            for s in found
        }
        return states == {"everything": "True", "time": "True", "time-warm": "True"}

    wait_until_ready(ready, release)
    yield release


def wait_until_ready(ready: Any, release: Release) -> None:
    """Block until `ready()`, at most 5 minutes (discovery pods start cold), quoting the statuses on failure."""
    from tests.controlplane.cluster import wait_until

    wait_until(
        ready,
        300,
        lambda: json.dumps([s.get("status") for s in release.json("mcpservers")["items"]], indent=1)[:4000],
        interval_s=1.0,
    )


SAMPLING_CAPS: dict[str, Any] = {**TASKS_CAPS, "sampling": {}}


@pytest.fixture
async def mcp(servers: Release) -> AsyncIterator[McpHttp]:
    async with aiohttp.ClientSession() as session:
        yield McpHttp(session, servers.url, TOKEN)


@pytest.mark.timeout(1800)  # the module's install, the server images and their discovery come first
async def test_mcp_server_time_in_a_python_only_image_works_per_call(servers: Release, mcp: McpHttp) -> None:
    task_id = await mcp.start_task("get_current_time", {"timezone": "Europe/Paris"})
    done = await mcp.wait_status(task_id, "completed", "failed", timeout_s=TASK_WAIT_S)
    assert done["status"] == "completed" and "Europe/Paris" in done["result"]["content"][0]["text"], done

    def ended() -> dict[str, Any] | None:  # the bridge posts the result, then exits; then the sidecar is stopped
        (pod,) = servers.json("pods", "-l", f"job-name=mcptask-{task_id}")["items"]
        (bridge,) = pod["status"].get("containerStatuses") or [{}]
        return pod if "terminated" in (bridge.get("state") or {}) else None

    pod = await until(ended, timeout_s=60, interval_s=0.5)
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    sidecar = next(s for s in pod["status"]["initContainerStatuses"] if s["name"] == "server")
    assert sidecar["image"].endswith(server_images.TIME_IMAGE) and sidecar["imageID"]


@pytest.mark.timeout(900)
async def test_mcp_server_time_works_warm_from_its_warm_pod(servers: Release, mcp: McpHttp) -> None:
    """`spec.warm` (docs/mcp-servers.md §6): the tool's warm pod (the server image as a native sidecar beside the
    bridge serving warm calls) becomes Ready and is published in the McpServer's `status.warm`; a synchronous
    call and a task of `warm-get_current_time` are answered from it, the task with no Job."""
    selector = "app.kubernetes.io/component=warm-worker,mcptasks.io/mcp-server=time-warm"

    def published() -> list[str]:
        (server,) = [s for s in servers.json("mcpservers")["items"] if s["metadata"]["name"] == "time-warm"]
        return list(
            ((server.get("status") or {}).get("warm") or {}).get("warm-get_current_time", {}).get("endpoints") or []
        )

    endpoints = await until(published, timeout_s=TASK_WAIT_S, interval_s=1.0)
    (pod,) = servers.json("pods", "-l", selector)["items"]
    assert f"{pod['status']['podIP']}:8080" in endpoints
    sidecar = next(s for s in pod["status"]["initContainerStatuses"] if s["name"] == "server")
    assert sidecar["image"].endswith(server_images.TIME_IMAGE) and sidecar["started"]
    reply = (await mcp.call_tool("warm-get_current_time", {"timezone": "Europe/Paris"}, caps=PLAIN_CAPS)).result
    assert not reply.get("isError") and "Europe/Paris" in reply["content"][0]["text"], reply
    task_id = await mcp.start_task("warm-get_current_time", {"timezone": "Asia/Tokyo"})
    done = await mcp.wait_status(task_id, "completed", "failed", timeout_s=TASK_WAIT_S)
    assert done["status"] == "completed" and "Asia/Tokyo" in done["result"]["content"][0]["text"], done
    assert not servers.json("jobs", "-l", f"mcptasks.io/task-id={task_id}")["items"]  # the warm pod ran it
    assert not servers.json("mcptasks", "-l", "mcptasks.io/tool=warm-get_current_time")["items"][1:]  # the task only
    (again,) = servers.json("pods", "-l", selector)["items"]
    assert again["metadata"]["uid"] == pod["metadata"]["uid"]


@pytest.mark.timeout(900)
async def test_server_everything_in_a_node_only_image_progress_operator_loss_elicitation_and_cancel(
    servers: Release, mcp: McpHttp
) -> None:
    """The long operation shows progress and completes with the server's text although every operator pod is
    deleted mid-operation (one Job, one pod); the elicitation goes `input_required` and completes after
    `tasks/update`; its sampling request likewise for a client that declared sampling, refused for one that did
    not; a cancelled long operation ends `cancelled` and its pod goes."""
    long = await mcp.start_task("trigger-long-running-operation", {"duration": 20, "steps": 20})
    running = await mcp.wait_task(long, lambda t: "of 20" in t.get("statusMessage", ""), timeout_s=TASK_WAIT_S)
    assert running["status"] == "working"
    servers.plane.kubectl("delete", "pods", "-n", servers.namespace, "-l", OPERATORS, "--wait=false")
    done = await mcp.wait_status(long, "completed", "failed", timeout_s=TASK_WAIT_S)
    assert done["status"] == "completed", done
    assert done["result"]["content"][0]["text"] == "Long running operation completed. Duration: 20 seconds, Steps: 20."
    assert len(servers.json("pods", "-l", f"job-name=mcptask-{long}")["items"]) == 1

    asking = await mcp.start_task("trigger-elicitation-request", {})
    asked = await mcp.wait_status(asking, "input_required", timeout_s=TASK_WAIT_S)
    ((key, request),) = asked["inputRequests"].items()
    assert request["method"] == "elicitation/create"
    await mcp.update(asking, {key: {"action": "accept", "content": {"name": "Ada Lovelace", "check": True}}})
    answered = await mcp.wait_status(asking, "completed", "failed", timeout_s=TASK_WAIT_S)
    assert "Name: Ada Lovelace" in "".join(block["text"] for block in answered["result"]["content"]), answered

    # The server's sampling request: put to a client that declared sampling, answered through `tasks/update`;
    # never put to one that did not (the server gets an error naming it, which its tool reports).
    sampled = (await mcp.call_tool("trigger-sampling-request", {"prompt": "hello"}, caps=SAMPLING_CAPS)).result
    asked = await mcp.wait_status(sampled["taskId"], "input_required", timeout_s=TASK_WAIT_S)
    ((key, request),) = asked["inputRequests"].items()
    assert request["method"] == "sampling/createMessage", request
    answer = {"role": "assistant", "content": {"type": "text", "text": "a sampled reply"}, "model": "test-model"}
    await mcp.update(sampled["taskId"], {key: answer}, caps=SAMPLING_CAPS)
    answered = await mcp.wait_status(sampled["taskId"], "completed", "failed", timeout_s=TASK_WAIT_S)
    assert "a sampled reply" in answered["result"]["content"][0]["text"], answered
    refused = await mcp.start_task("trigger-sampling-request", {"prompt": "hello"})
    ended = await mcp.wait_status(refused, "completed", "failed", timeout_s=TASK_WAIT_S)
    assert "inputRequests" not in ended, ended
    assert "cannot answer sampling/createMessage" in json.dumps(ended.get("result") or ended.get("error")), ended

    cancelled = await mcp.start_task("trigger-long-running-operation", {"duration": 120, "steps": 120})
    await mcp.wait_task(cancelled, lambda t: "of 120" in t.get("statusMessage", ""), timeout_s=TASK_WAIT_S)
    await mcp.cancel(cancelled)
    ended = await mcp.wait_status(cancelled, "cancelled", "completed", "failed", timeout_s=TASK_WAIT_S)
    assert ended["status"] == "cancelled", ended
    await until(
        lambda: not servers.json("pods", "-l", f"job-name=mcptask-{cancelled}")["items"],
        timeout_s=TASK_WAIT_S,
        interval_s=1.0,
    )
