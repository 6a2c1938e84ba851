"""The operator's admission on the real control plane (gateway + operator + API server + controller manager +
process node): a cap of running tasks shared fairly between tenants, per-tenant budgets, the count across an
operator restart, and Kueue's suspended Jobs. Our own choices (docs/kubernetes.md §Limits and admission); the
statusMessage of a waiting task is the spec's (tasks extension 2026-07-28: `working` with `statusMessage`).

Each task is the `gated` tool, which runs until its own gate file exists: the tests decide when a slot frees, so
they assert the order of admissions and never a duration.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from tests.conftest import REPO
from tests.controlplane.cluster import ControlPlane, free_port, local_tool_manifests
from tests.kube.conftest import Gateways, Operators, client, until
from tests.metrics import scrape, value

TOKENS = {
    "tokens": [
        {"token": "alice", "tenant": "a", "subject": "alice"},
        {"token": "bob", "tenant": "b", "subject": "bob"},
    ]
}
NEXT = "queued: next in line for a slot"


def job_owners(plane: ControlPlane, namespace: str) -> dict[str, dict[str, Any]]:
    """task id → its Job, as the API server holds them."""
    listed = json.loads(plane.kubectl("get", "jobs", "-n", namespace, "-o", "json"))["items"]
    return {job["metadata"]["labels"]["mcptasks.io/task-id"]: job for job in listed}


def task_object(plane: ControlPlane, namespace: str, task_id: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(plane.kubectl("get", "mcptask", task_id, "-n", namespace, "-o", "json"))
    return loaded


class Gates:
    """One gate file per task: the `gated` tool's run ends when its gate exists."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.count = 0

    def new(self) -> str:
        self.count += 1
        return str(self.folder / f"gate-{self.count}")

    def open(self, gate: str) -> None:
        Path(gate).touch()

    def open_all(self) -> None:
        for number in range(1, self.count + 1):
            (self.folder / f"gate-{number}").touch()


@pytest.fixture
def gates(tmp_path: Path) -> Any:
    opened = Gates(tmp_path)
    try:
        yield opened
    finally:
        opened.open_all()  # no tool process outlives its test


@pytest.fixture
def stopping_namespace(control_plane: ControlPlane, namespace: str) -> Iterator[str]:
    """The test's namespace, deleted afterwards so that the process node stops its warm workers."""
    try:
        yield namespace
    finally:
        control_plane.kubectl("delete", "namespace", namespace, "--wait=false")


def tokens_file(tmp_path: Path) -> Path:
    path = tmp_path / "tokens.yaml"
    path.write_text(yaml.safe_dump(TOKENS))
    return path


async def message_is(mcp: Any, task_id: str, expected: str) -> dict[str, Any]:
    """Wait until the task's `statusMessage` (through `tasks/get`) is `expected`; return the task."""
    task: dict[str, Any] = await until(lambda: _read(mcp, task_id, expected))
    return task


async def _read(mcp: Any, task_id: str, expected: str) -> dict[str, Any] | None:
    task: dict[str, Any] = (await mcp.get(task_id)).result
    return task if task.get("statusMessage") == expected else None


async def test_a_tenants_task_behind_another_tenants_eight_waits_one_slot_and_the_count_survives_a_restart(
    gateways: Gateways,
    operators: Operators,
    http_session: aiohttp.ClientSession,
    control_plane: ControlPlane,
    namespace: str,
    gates: Gates,
    tmp_path: Path,
) -> None:
    """Cap 2 (`MCPTASKS_MAX_RUNNING_TASKS`): tenant A's 8 tasks take both slots, the rest wait `working` with a
    `queued: ...` message naming only A's own tasks; B's task, created after them, gets the first slot that
    frees (not A's third), and a restarted operator counts the 2 running Jobs from the cluster (it creates no
    third Job until one ends)."""
    env = {"MCPTASKS_MAX_RUNNING_TASKS": "2"}
    first = operators.start(env=env)
    gateway = await gateways.start(tokens_file=tokens_file(tmp_path))
    alice, bob = client(http_session, gateway, "alice"), client(http_session, gateway, "bob")
    a_gates = [gates.new() for _ in range(8)]
    a = [await alice.start_task("gated", {"gate": gate}) for gate in a_gates]
    await until(lambda: set(job_owners(control_plane, namespace)) == set(a[:2]))
    await message_is(alice, a[2], NEXT)
    waiting = await message_is(alice, a[7], "queued: 5 of your tenant's tasks ahead")
    assert waiting["status"] == "working"

    b_gate = gates.new()
    b = await bob.start_task("gated", {"gate": b_gate})
    await message_is(bob, b, NEXT)  # B's own view: nothing of A's queue
    assert set(job_owners(control_plane, namespace)) == set(a[:2]), "no Job beyond the cap"
    shown = control_plane.kubectl("get", "mcptasks", "-n", namespace, b)
    assert NEXT in shown and "working" in shown
    started = {c["type"]: c for c in task_object(control_plane, namespace, b)["status"]["conditions"]}["Started"]
    assert (started["status"], started["reason"]) == ("False", "Queued")

    gates.open(a_gates[0])
    await alice.wait_status(a[0], "completed")
    jobs = await until(lambda: (owned := job_owners(control_plane, namespace)) and b in owned and owned)
    assert a[2] not in jobs, "the freed slot went to B (A runs 1, B runs 0), not to A's third task"
    await message_is(bob, b, "waiting for the gate")  # admitted and running: the tool's own message

    operators.kill(first)
    second = operators.start(env=env)
    await until(lambda: b"leading in namespace" in operators.log(second))
    gates.open(b_gate)
    assert (await bob.wait_status(b, "completed"))["status"] == "completed"
    jobs = await until(lambda: (owned := job_owners(control_plane, namespace)) and a[2] in owned and owned)
    assert not set(a[3:]) & set(jobs), "the new leader counted A's running Job: one slot freed, one Job created"
    assert (await alice.get(a[3])).result["statusMessage"] == NEXT


async def test_a_job_of_a_tenant_over_its_running_budget_waits_for_its_own_slot_while_others_start(
    gateways: Gateways,
    operators: Operators,
    http_session: aiohttp.ClientSession,
    control_plane: ControlPlane,
    namespace: str,
    gates: Gates,
    tmp_path: Path,
) -> None:
    """`MCPTASKS_MAX_RUNNING_PER_TENANT=1`, no cap: A's second task gets no Job while A's first runs (its message
    names the limit; a `Queued` Event says so; `/metrics` counts it queued), B's task gets its Job at once, and
    A's second starts when A's first ends."""
    metrics_port = free_port()
    operators.start(
        "--metrics-port",
        str(metrics_port),
        env={"MCPTASKS_MAX_RUNNING_PER_TENANT": "1", "MCPTASKS_METRICS_TENANTS": "a"},
    )
    gateway = await gateways.start(tokens_file=tokens_file(tmp_path))
    alice, bob = client(http_session, gateway, "alice"), client(http_session, gateway, "bob")
    first_gate, second_gate = gates.new(), gates.new()
    first = await alice.start_task("gated", {"gate": first_gate})
    await until(lambda: first in job_owners(control_plane, namespace))
    second = await alice.start_task("gated", {"gate": second_gate})
    held = NEXT + "; your tenant is at its limit of running tasks (max_running_per_tenant)"
    await message_is(alice, second, held)
    other = await bob.start_task("gated", {"gate": gates.new()})
    await until(lambda: other in job_owners(control_plane, namespace))
    assert second not in job_owners(control_plane, namespace)

    def queued_event() -> bool:
        events = json.loads(control_plane.kubectl("get", "events.events.k8s.io", "-n", namespace, "-o", "json"))
        return any(e["reason"] == "Queued" and e["regarding"]["name"] == second for e in events["items"])

    await until(queued_event)

    async def gauges() -> bool:
        samples = await scrape(http_session, f"http://127.0.0.1:{metrics_port}/metrics")
        queued, running = (
            value(samples, "mcptasks_tasks_queued", tenant="a"),
            value(samples, "mcptasks_tasks_running", tenant="a"),
        )
        return (queued, running, value(samples, "mcptasks_tasks_running", tenant="other")) == (1, 1, 1)

    await until(gauges)  # A: one waits, one runs; B (not listed): one runs
    gates.open(first_gate)
    await until(lambda: second in job_owners(control_plane, namespace))
    gates.open(second_gate)
    done = await alice.wait_status(second, "completed")
    assert done["result"]["content"][0]["text"] == "passed the gate on attempt 1"


def kueue_crds() -> Path:
    """Kueue's CRDs as `tests/kueue/fetch.sh` cached them (skip, or fail under `.ci/run`, when absent)."""
    found = subprocess.run(
        ["bash", str(REPO / "tests" / "kueue" / "fetch.sh"), "--cached-only"],
        check=False,
        capture_output=True,
        text=True,
    )
    if found.returncode != 0:
        reason = f"Kueue's CRDs are not fetched (make kueue): {found.stderr.strip()}"
        if os.environ.get("MCPTASKS_REQUIRE_CONTROL_PLANE") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    return Path(found.stdout.strip().splitlines()[-1])


KUEUE_OBJECTS = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: mcp-tasks-default}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: mcp-tasks-%(namespace)s}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: mcp-tasks-default
      resources:
      - {name: cpu, nominalQuota: 4}
      - {name: memory, nominalQuota: 8Gi}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: tasks, namespace: %(namespace)s}
spec: {clusterQueue: mcp-tasks-%(namespace)s}
"""


async def test_with_kueue_the_job_is_created_suspended_and_labelled_and_runs_once_admitted(
    gateways: Gateways,
    operators: Operators,
    http_session: aiohttp.ClientSession,
    control_plane: ControlPlane,
    namespace: str,
    gates: Gates,
    tmp_path: Path,
) -> None:
    """Kueue v0.17.0's CRDs on the control plane, a LocalQueue `tasks`: with `MCPTASKS_KUEUE_ENABLED` the
    operator creates the task's Job suspended with `kueue.x-k8s.io/queue-name: tasks`, no pod starts, the task
    says it waits for Kueue; when the test sets `suspend: false` (what Kueue's controller does on admission) the
    pod runs and the task completes. The cap does not hold Kueue's Jobs (Kueue's quota does)."""
    crds = kueue_crds()
    control_plane.kubectl("apply", "--server-side", "-f", str(crds))
    control_plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(crds))
    control_plane.kubectl("apply", "-f", "-", input_text=KUEUE_OBJECTS % {"namespace": namespace})
    operators.start(
        env={"MCPTASKS_KUEUE_ENABLED": "true", "MCPTASKS_KUEUE_QUEUE_NAME": "tasks", "MCPTASKS_MAX_RUNNING_TASKS": "1"}
    )
    gateway = await gateways.start(tokens_file=tokens_file(tmp_path))
    bob = client(http_session, gateway, "bob")
    gate = gates.new()
    task_ids = [await bob.start_task("gated", {"gate": gate}) for _ in range(2)]
    jobs = await until(lambda: (owned := job_owners(control_plane, namespace)) and len(owned) == 2 and owned)
    for task_id in task_ids:
        job = jobs[task_id]
        assert job["spec"]["suspend"] is True
        assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "tasks"
        await message_is(bob, task_id, "queued: waiting for Kueue to admit its Job (LocalQueue tasks)")
    pods = json.loads(control_plane.kubectl("get", "pods", "-n", namespace, "-o", "json"))["items"]
    assert not pods, "a suspended Job has no pod"

    admitted = task_ids[0]
    patch = json.dumps({"spec": {"suspend": False}})
    control_plane.kubectl("patch", "job", f"mcptask-{admitted}", "-n", namespace, "--type=merge", "-p", patch)
    await message_is(bob, admitted, "waiting for the gate")  # running: the tool's own message
    gates.open(gate)
    done = await bob.wait_status(admitted, "completed")
    assert done["result"]["content"][0]["text"] == "passed the gate on attempt 1"
    still = (await bob.get(task_ids[1])).result
    assert still["status"] == "working" and still["statusMessage"].startswith("queued: waiting for Kueue")


async def test_warm_calls_share_the_cap_and_the_freed_slot_goes_to_the_other_tenant(
    gateways: Gateways,
    operators: Operators,
    http_session: aiohttp.ClientSession,
    control_plane: ControlPlane,
    stopping_namespace: str,
    tmp_path: Path,
) -> None:
    """A warm tool's tasks get no Job; with cap 2 the operator's warm runner claims A's first two, A's third
    and B's task wait `queued: ...`, and when A's first is cancelled the slot goes to B's task, not A's third."""
    namespace = stopping_namespace
    (sleeper,) = [
        document
        for document in local_tool_manifests([REPO / "tests" / "tools"])
        if document["metadata"]["name"] == "warm-sleeper"
    ]
    sleeper["spec"]["warm"]["concurrency"] = 4  # the pod takes every call: the cap is what holds them
    control_plane.kubectl("apply", "-n", namespace, "-f", "-", input_text=yaml.safe_dump(sleeper))
    operators.start(env={"MCPTASKS_MAX_RUNNING_TASKS": "2"})
    gateway = await gateways.start(tokens_file=tokens_file(tmp_path))
    catalog: Any = gateway.services.catalog
    await until(lambda: catalog.warm_endpoints("warm_sleeper"))
    alice, bob = client(http_session, gateway, "alice"), client(http_session, gateway, "bob")

    def sleeping(task: dict[str, Any]) -> bool:
        return "sleeping in pid" in (task.get("statusMessage") or "")

    a = [await alice.start_task("warm_sleeper", {"seconds": 120}) for _ in range(3)]
    for task_id in a[:2]:
        await alice.wait_task(task_id, sleeping)
    await message_is(alice, a[2], NEXT)
    b = await bob.start_task("warm_sleeper", {"seconds": 120})
    await message_is(bob, b, NEXT)

    await alice.cancel(a[0])
    assert (await alice.wait_status(a[0], "cancelled"))["status"] == "cancelled"
    await bob.wait_task(b, sleeping)
    assert (await alice.get(a[2])).result["statusMessage"] == NEXT, "A runs 1, B ran 0: the slot was B's"
    assert json.loads(control_plane.kubectl("get", "jobs", "-n", namespace, "-o", "json"))["items"] == []
    for mcp, task_id in ((alice, a[1]), (alice, a[2]), (bob, b)):
        await mcp.cancel(task_id)
