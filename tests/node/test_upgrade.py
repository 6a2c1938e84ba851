"""`helm upgrade` with work in flight, and `helm rollback` (issue 30 §5), on the real node.

The charts and image of `images.PREVIOUS_COMMIT` (the commit before owners named their issuer) are
installed first; tasks are finished, running and waiting for input when both charts are upgraded to this
repository's, with this image; then the release is rolled back. Every step goes through the gateway
Service (`kubectl port-forward`) with two principals of one tenant, as users would.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.conftest import REPO, McpHttp
from tests.controlplane.cluster import ControlPlane
from tests.node import images
from tests.node.cluster import RealNode
from tests.node.test_release import INSTALL_TIMEOUT, TASK_WAIT_S, port_forward, restricted_namespace

pytestmark = pytest.mark.timeout(1500)

RELEASE = "u"
SERVICE = f"{RELEASE}-mcp-tasks-gateway"
TOKENS = {"alice": "upgrade-alice", "bob": "upgrade-bob"}
UNKNOWN = "0" * 32


def _values(storage_class: str, tag: str) -> list[str]:
    repository = images.IMAGE.split(":")[0]
    return [
        *("--set", f"image.repository={repository}", "--set", f"image.tag={tag}"),
        *("--set", "auth.existingSecret=mcp-tasks-tokens", "--set", "examples.enabled=true"),
        *("--set", f"persistence.storageClass={storage_class}", "--set", "persistence.size=1Gi"),
        *("--set", "gateway.replicas=1"),
    ]


def _helm(plane: ControlPlane, namespace: str, *args: str) -> None:
    plane.helm(*args, "--namespace", namespace, "--wait", "--timeout", INSTALL_TIMEOUT, timeout_s=600)


def _crds(plane: ControlPlane, charts: Path) -> None:
    plane.helm("upgrade", "--install", "mcp-tasks-crds", str(charts / "mcp-tasks-crds"), "--take-ownership", "--wait")


@pytest.fixture(scope="module")
def previous(real_node: RealNode) -> Path:
    """The files of the previous release (its charts), once its image was built with the node's."""
    source = images.previous_source(real_node.workdir / "build" / "previous")
    if source is None:
        pytest.skip(f"this clone does not hold {images.PREVIOUS_COMMIT} (a shallow clone): no release to upgrade from")
    if not images.shares_wheelhouse(source):
        pytest.fail(
            f"{images.PREVIOUS_COMMIT}'s dependencies differ from this tree's, so the shared wheelhouse cannot "
            "build its image (tests/node/images.py builds both from one): give the previous release a "
            "wheelhouse of its own there, or move PREVIOUS_COMMIT to the last release"
        )
    return source


@pytest.fixture(scope="module")
def namespace(real_node: RealNode, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A `restricted` namespace with the token Secret and a ReadWriteMany volume for the data claim."""
    plane = real_node.control_plane
    entries = [{"token": token, "tenant": "acme", "subject": subject} for subject, token in TOKENS.items()]
    name = restricted_namespace(plane, "up", entries, tmp_path_factory.mktemp("upgrade"))
    yield name
    plane.helm("uninstall", RELEASE, "--namespace", name, "--wait", timeout_s=300)


async def _refusal(client: McpHttp, task_id: str) -> tuple[int, Any]:
    """The HTTP status and JSON-RPC error `tasks/get` of `task_id` answers `client`."""
    reply = await client.get(task_id)
    return reply.status, reply.body.get("error")


def _jobs(plane: ControlPlane, namespace: str, task_id: str) -> list[str]:
    """The names of the task's Jobs (`mcptask-<taskId>`, once per run that made one)."""
    names = plane.kubectl("get", "jobs", "-n", namespace, "-o", "name").split()
    return [name.split("/", 1)[1] for name in names if task_id in name]


def _runs(plane: ControlPlane, namespace: str, task_id: str) -> int:
    """How many tool containers ran for the task: pods of its Job (one per run; never deleted here)."""
    pods = plane.kubectl("get", "pods", "-n", namespace, "-o", "name", "-l", f"job-name=mcptask-{task_id}")
    return len(pods.split())


async def test_an_upgrade_and_a_rollback_with_tasks_in_flight_lose_nothing(
    real_node: RealNode, previous: Path, namespace: str
) -> None:
    """From the previous release's charts and image to this one's while a task has finished, one runs and
    one waits for input: each ends as it would have without the upgrade, by one run, readable by its owner
    only (bob gets exactly what an unknown id gets). Then `helm rollback` to the previous release (the CRDs
    chart stays upgraded, as docs/kubernetes.md says to do): the tasks created before the upgrade are served;
    those this release created are hidden (as unknown ids) until the release is upgraded again, when they
    are back, and the one that waited for input is still answerable."""
    plane = real_node.control_plane
    storage_class = f"rwx-{namespace}"
    _crds(plane, previous / "charts")
    old_tag = images.PREVIOUS_IMAGE.split(":")[1]
    new_tag = images.IMAGE.split(":")[1]
    _helm(
        plane, namespace, "install", RELEASE, str(previous / "charts" / "mcp-tasks"), *_values(storage_class, old_tag)
    )
    async with aiohttp.ClientSession() as session:
        with port_forward(plane, namespace, f"service/{SERVICE}", 80) as port:
            alice = McpHttp(session, f"http://127.0.0.1:{port}/mcp", TOKENS["alice"])
            finished = await alice.start_task("count_primes", {"limit": 1000})
            done_before = await alice.wait_status(finished, "completed", timeout_s=TASK_WAIT_S)
            asking = await alice.start_task("hello_world")
            asked = await alice.wait_status(asking, "input_required", timeout_s=TASK_WAIT_S)
            running = await alice.start_task("count_primes", {"limit": 3_000_000_000})
            await alice.wait_status(running, "working", timeout_s=TASK_WAIT_S)

        _crds(plane, REPO / "charts")
        _helm(
            plane, namespace, "upgrade", RELEASE, str(REPO / "charts" / "mcp-tasks"), *_values(storage_class, new_tag)
        )
        with port_forward(plane, namespace, f"service/{SERVICE}", 80) as port:
            url = f"http://127.0.0.1:{port}/mcp"
            alice, bob = McpHttp(session, url, TOKENS["alice"]), McpHttp(session, url, TOKENS["bob"])
            assert (await alice.get(finished)).result["result"] == done_before["result"]
            still = await alice.wait_status(asking, "input_required", timeout_s=60)
            assert still["inputRequests"] == asked["inputRequests"], "the same question, under the same key"
            unknown = await _refusal(bob, UNKNOWN)
            for task_id in (finished, asking, running):
                assert await _refusal(bob, task_id) == unknown, task_id
            (key,) = asked["inputRequests"]
            assert (
                "result" in (await alice.update(asking, {key: {"action": "accept", "content": {"input": "Ada"}}})).body
            )
            answered = await alice.wait_status(asking, "completed", "failed", timeout_s=TASK_WAIT_S)
            assert answered["result"]["content"][0]["text"] == "Hello, Ada!", answered
            counted = await alice.wait_status(running, "completed", "failed", timeout_s=TASK_WAIT_S)
            assert counted["status"] == "completed" and not counted["result"].get("isError"), counted
            for task_id in (asking, running):
                assert _jobs(plane, namespace, task_id) == [f"mcptask-{task_id}"], task_id
                assert _runs(plane, namespace, task_id) == 1, f"{task_id} was not run again"
            after = await alice.start_task("count_primes", {"limit": 1000})
            done_after = await alice.wait_status(after, "completed", timeout_s=TASK_WAIT_S)
            waiting = await alice.start_task("hello_world")
            first_ask = await alice.wait_status(waiting, "input_required", timeout_s=TASK_WAIT_S)

        _helm(plane, namespace, "rollback", RELEASE, "1")
        with port_forward(plane, namespace, f"service/{SERVICE}", 80) as port:
            url = f"http://127.0.0.1:{port}/mcp"
            alice, bob = McpHttp(session, url, TOKENS["alice"]), McpHttp(session, url, TOKENS["bob"])
            for task_id, result in ((finished, done_before), (asking, answered), (running, counted)):
                read = await alice.get(task_id)
                assert read.status == 200 and read.result.get("result") == result["result"], (task_id, read.body)
            unknown = await _refusal(bob, UNKNOWN)
            for task_id in (finished, asking, running, after, waiting):
                assert await _refusal(bob, task_id) == unknown, task_id
            # What a downgrade loses (docs/kubernetes.md, Upgrades): the previous release refuses an owner that
            # names its issuer, so the tasks this release created are hidden from everyone, their owner too,
            # exactly like unknown ids, until the release comes back; it never shows them to anyone else.
            for task_id in (after, waiting):
                assert await _refusal(alice, task_id) == await _refusal(alice, UNKNOWN), task_id

        _helm(
            plane, namespace, "upgrade", RELEASE, str(REPO / "charts" / "mcp-tasks"), *_values(storage_class, new_tag)
        )
        with port_forward(plane, namespace, f"service/{SERVICE}", 80) as port:
            alice = McpHttp(session, f"http://127.0.0.1:{port}/mcp", TOKENS["alice"])
            assert (await alice.get(after)).result["result"] == done_after["result"], "back once the release is"
            for task_id, result in ((finished, done_before), (asking, answered), (running, counted)):
                assert (await alice.get(task_id)).result["result"] == result["result"], task_id
            # The previous release could not read this task, so its worker API refused the waiting tool (404)
            # and the tool ended. Its Job (hello_world is idempotent: backoffLimit 2) starts the next pod,
            # whose first call to this release makes it the task's next run: the lost run's question is
            # withdrawn and asked again under a new key. How many pods the rollback's old operator refused
            # depends on how long it ran; if it refused all three, the Job failed and the task ends as any
            # tool that ends without a result (docs/kubernetes.md, Upgrades: what a downgrade loses).
            lost_keys = set(first_ask["inputRequests"])

            def asked_again_or_ended(task: dict[str, Any]) -> bool:
                keys = set(task.get("inputRequests") or ())
                fresh = task["status"] == "input_required" and bool(keys) and not keys & lost_keys
                return fresh or task["status"] in ("completed", "failed", "cancelled")

            # Twice TASK_WAIT_S: the Job's next pod may come after its back-off (10 s before its second pod, 20 s
            # before its third) plus this release's rollout; once, with the node alone on the machine, 120 s ran out.
            again = await alice.wait_task(waiting, asked_again_or_ended, timeout_s=2 * TASK_WAIT_S)
            runs = _runs(plane, namespace, waiting)
            if again["status"] == "input_required":
                (key,) = again["inputRequests"]
                reply = await alice.update(waiting, {key: {"action": "accept", "content": {"input": "Bo"}}})
                assert "result" in reply.body, reply.body
                ended = await alice.wait_status(waiting, "completed", "failed", timeout_s=TASK_WAIT_S)
                assert ended["result"]["content"][0]["text"] == "Hello, Bo!", ended
                assert 2 <= runs <= 3, f"{runs} runs: those the rollback lost, then the one that answered"
            else:
                assert again["status"] == "completed" and again["result"]["isError"] is True, again
                assert again["statusMessage"].endswith("ended without a result"), again
                assert runs == 3, f"{runs} runs: the Job's three, each refused by the previous release"
            assert _jobs(plane, namespace, waiting) == [f"mcptask-{waiting}"]
