"""End to end on the real control plane: gateway + operator + API server + controller manager + process node.

Each task runs as a Job whose pod the process node runs as a local process; the tool talks to the
operator's worker API exactly as it would from a pod.
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from kubernetes_asyncio.client import ApiClient
from multidict import CIMultiDict

from mcp_tasks.cli.settings import SettingsError
from mcp_tasks.operator.events import EventRecorder, TaskEvent
from mcp_tasks.tasks import transitions
from mcp_tasks.tasks.ids import mint_task_id
from mcp_tasks.tasks.inline import hidden
from mcp_tasks.tasks.interfaces import utc_now
from mcp_tasks.tasks.owner import Owner
from mcp_tasks.tasks.record import TaskRecord
from tests.conftest import until as shared_until
from tests.controlplane.cluster import ControlPlane, free_port
from tests.kube.conftest import KUBE_WAIT_S, LEADER_ENV, Gateways, Operators, client, get_object, sep_hello_world, until
from tests.kube.test_rbac import CHART, account_kubeconfig
from tests.metrics import scrape, value

WAIT_S = 30.0


def kube_json(plane: ControlPlane, namespace: str, *what: str) -> Any:
    return json.loads(plane.kubectl("get", *what, "-n", namespace, "-o", "json"))


def jobs_of(plane: ControlPlane, namespace: str, task_id: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = kube_json(plane, namespace, "jobs", "-l", f"mcptasks.io/task-id={task_id}")["items"]
    return items


def conditions_of(plane: ControlPlane, namespace: str, task_id: str) -> dict[str, dict[str, Any]]:
    """The McpTask's `status.conditions`, by type, as the API server holds them."""
    task = kube_json(plane, namespace, "mcptask", task_id)
    return {condition["type"]: condition for condition in task["status"].get("conditions", [])}


def events_of(plane: ControlPlane, namespace: str, task_id: str) -> list[dict[str, Any]]:
    """The events.k8s.io/v1 Events regarding the McpTask, oldest first, as the API server holds them."""
    items: list[dict[str, Any]] = kube_json(plane, namespace, "events.events.k8s.io")["items"]
    mine = [event for event in items if (event.get("regarding") or {}).get("name") == task_id]
    return sorted(mine, key=lambda event: event.get("eventTime") or "")


async def reasons_become(plane: ControlPlane, namespace: str, task_id: str, *expected: str) -> list[dict[str, Any]]:
    """Wait until the task's Events have exactly the `expected` reasons, in order (they are written in the
    background); return them."""
    await until(lambda: [e["reason"] for e in events_of(plane, namespace, task_id)] == list(expected))
    return events_of(plane, namespace, task_id)


async def test_the_sep_hello_world_flow_runs_as_a_job(
    gateways: Gateways, operators: Operators, control_plane: ControlPlane, namespace: str
) -> None:
    """SEP-2663 Example Message Flow, verbatim, with the tool in a Job's pod talking to the operator;
    the operator's `/metrics` (scraped over HTTP) shows the Job, the run and the outcome."""
    metrics_port = free_port()
    operators.start("--metrics-port", str(metrics_port))
    gateway = await gateways.start()
    task_id = await sep_hello_world(gateway.url)
    async with aiohttp.ClientSession() as session:
        samples = await scrape(session, f"http://127.0.0.1:{metrics_port}/metrics")
    assert value(samples, "mcptasks_jobs_created_total") == 1
    assert value(samples, "mcptasks_runs_started_total", tool="hello_world") == 1
    finished = {"tool": "hello_world", "status": "completed", "reason": "Completed"}
    assert value(samples, "mcptasks_tasks_finished_total", **finished) == 1, "the result is written by the operator"
    assert value(samples, "mcptasks_worker_api_requests_total", route="/input-requests", code="200") == 1
    status_writes = {"store": "kubernetes", "operation": "replace_status"}
    assert value(samples, "mcptasks_store_operation_duration_seconds_count", **status_writes) > 0

    (job,) = jobs_of(control_plane, namespace, task_id)
    task = get_object(control_plane, namespace, task_id)
    assert task is not None
    (finished,) = task["status"]["conditions"]  # a finished task keeps Finished alone (conditions.py)
    assert (finished["type"], finished["status"], finished["reason"]) == ("Finished", "True", "Completed")
    assert finished["lastTransitionTime"] >= task["spec"]["createdAt"]
    owner = job["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "McpTask",
        task_id,
        task["metadata"]["uid"],
        True,
    )
    spec = job["spec"]
    assert spec["backoffLimit"] == 2, "hello_world is declared idempotent: it may be re-run"
    assert "activeDeadlineSeconds" not in spec and spec["ttlSecondsAfterFinished"] > 0
    container = spec["template"]["spec"]["containers"][0]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert spec["template"]["spec"]["automountServiceAccountToken"] is False
    env = {item["name"]: item for item in container["env"]}
    assert "MCPTASKS_WORKER_TOKEN" not in env and env["MCPTASKS_WORKER_TOKEN_FILE"]["value"].endswith("/token")
    listed = control_plane.kubectl("get", "secrets", "-n", namespace, "-o", "name").split()
    assert not [name for name in listed if "mcptask" in name], "no Secret per task, and no operator key"
    await until(lambda: jobs_of(control_plane, namespace, task_id)[0]["status"].get("succeeded") == 1)
    table = control_plane.kubectl("get", "mcptasks,jobs", "-n", namespace)
    assert task_id in table and "completed" in table and "Complete" in table
    events = await reasons_become(
        control_plane, namespace, task_id, "JobCreated", "ToolRunning", "InputRequested", "Completed"
    )
    assert all(e["regarding"]["uid"] == task["metadata"]["uid"] and e["type"] == "Normal" for e in events)
    assert all(
        e["related"]
        == {"apiVersion": "batch/v1", "kind": "Job", "name": job["metadata"]["name"], "namespace": namespace}
        for e in events
    )
    assert events[2]["note"] == "Waiting for input: name"
    assert events[0]["reportingController"] == "mcptasks.io/operator"
    described = control_plane.kubectl("describe", "mcptask", task_id, "-n", namespace)
    assert "JobCreated" in described and "InputRequested" in described and "Completed" in described


async def test_cancelling_a_running_task_deletes_its_job_and_ends_cancelled(
    gateways: Gateways,
    operators: Operators,
    http_session: aiohttp.ClientSession,
    control_plane: ControlPlane,
    namespace: str,
) -> None:
    """tasks/cancel is acknowledged at once; the operator deletes the Job, the pod gets SIGTERM, then `cancelled`."""
    operators.start()
    mcp = client(http_session, await gateways.start())
    task_id = await mcp.start_task("sleeper", {"seconds": 60})
    await until(
        lambda: bool(
            kube_json(
                control_plane,
                namespace,
                "pods",
                "-l",
                f"mcptasks.io/task-id={task_id}",
                "--field-selector",
                "status.phase=Running",
            )["items"]
        )
    )
    ack = await mcp.cancel(task_id)
    assert "result" in ack.body, ack.body  # acknowledged at once; the work stops later
    done = await mcp.wait_status(task_id, "cancelled", "completed", "failed", timeout_s=WAIT_S)
    assert done["status"] == "cancelled"
    finished = conditions_of(control_plane, namespace, task_id)["Finished"]
    assert (finished["status"], finished["reason"]) == ("True", "Cancelled")
    # the tool may be cancelled before it reads its input, so `ToolRunning` may come or not in between
    await until(lambda: [e["reason"] for e in events_of(control_plane, namespace, task_id)][-1:] == ["Cancelled"])
    reasons = [e["reason"] for e in events_of(control_plane, namespace, task_id)]
    assert reasons in (["JobCreated", "ToolRunning", "Cancelled"], ["JobCreated", "Cancelled"]), reasons
    await until(lambda: not jobs_of(control_plane, namespace, task_id))
    await until(
        lambda: not kube_json(control_plane, namespace, "pods", "-l", f"mcptasks.io/task-id={task_id}")["items"]
    )


async def test_killing_the_operator_mid_run_loses_nothing_and_creates_no_second_job(
    gateways: Gateways,
    operators: Operators,
    http_session: aiohttp.ClientSession,
    control_plane: ControlPlane,
    namespace: str,
) -> None:
    first = operators.start()
    mcp = client(http_session, await gateways.start())
    task_id = await mcp.start_task("confirm_delete", {"filename": "report.pdf"})
    asked = await mcp.wait_status(task_id, "input_required", timeout_s=WAIT_S)
    assert list(asked["inputRequests"]) == ["confirm"]
    operators.kill(first)
    answer = {"confirm": {"action": "accept", "content": {"confirm": True}}}
    assert "result" in (await mcp.update(task_id, answer)).body, "answers are stored in the McpTask, not the operator"
    operators.start()
    done = await mcp.wait_status(task_id, "completed", "failed", timeout_s=WAIT_S)
    assert done["status"] == "completed", done
    assert done["result"]["content"][0]["text"] == "Deleted report.pdf"
    assert len(jobs_of(control_plane, namespace, task_id)) == 1
    stored = get_object(control_plane, namespace, task_id)
    assert stored is not None and stored["status"]["issuedInputKeys"] == ["confirm"]


async def test_a_round_of_input_requests_sent_again_gets_its_keys_from_the_mcptask(
    gateways: Gateways,
    operators: Operators,
    http_session: aiohttp.ClientSession,
    control_plane: ControlPlane,
    namespace: str,
) -> None:
    """The round's digest lives in the McpTask's status (`inputRoundDigest`; the CRD keeps it, an unknown
    field would be pruned), so a pod that sends its round again, as after an operator restart lost the first
    answer, gets the same key from whichever replica answers; an answer it took is handed out again."""
    operators.start()
    mcp = client(http_session, await gateways.start())
    task_id = await mcp.start_task("round_resender", {})
    asked = await mcp.wait_status(task_id, "input_required", timeout_s=WAIT_S)
    assert list(asked["inputRequests"]) == ["go"]
    stored = get_object(control_plane, namespace, task_id)
    assert stored is not None
    assert len(stored["status"]["inputRoundDigest"]) == 43, stored["status"]
    await mcp.update(task_id, {"go": {"action": "accept", "content": {"ok": True}}})
    done = await mcp.wait_status(task_id, "completed", "failed", timeout_s=WAIT_S)
    assert done["result"]["content"][0]["text"] == "400 go go accept accept", done
    finished = get_object(control_plane, namespace, task_id)
    assert finished is not None and "inputRoundDigest" not in finished["status"], "a finished task drops it"


UNPULLABLE = """\
apiVersion: mcptasks.io/v1alpha1
kind: McpTool
metadata: {name: never-starts}
spec:
  name: never_starts
  description: Its image cannot be pulled.
  inputSchema: {type: object}
  execution: {taskPolicy: required}
  container: {image: registry.invalid/missing:1, command: [python, -c, "pass"]}
"""


async def test_a_pod_that_never_starts_fails_its_task_within_the_start_deadline(
    gateways: Gateways,
    operators: Operators,
    http_session: aiohttp.ClientSession,
    control_plane: ControlPlane,
    namespace: str,
) -> None:
    control_plane.kubectl("apply", "-n", namespace, "-f", "-", input_text=UNPULLABLE)
    operators.start("--start-deadline", "3")
    mcp = client(http_session, await gateways.start())

    async def listed() -> bool:
        return "never_starts" in [t["name"] for t in (await mcp.request("tools/list")).result["tools"]]

    await until(listed, timeout_s=10)
    task_id = await mcp.start_task("never_starts", {})
    # `kubectl wait` on the Finished condition, started while the task still runs (API conventions).
    waiting = asyncio.create_task(
        asyncio.to_thread(
            control_plane.kubectl,
            "wait",
            "-n",
            namespace,
            "--for=condition=Finished",
            f"mcptask/{task_id}",
            "--timeout=60s",
        )
    )
    done = await mcp.wait_status(task_id, "failed", "completed", timeout_s=WAIT_S)
    assert done["status"] == "failed"
    assert "could not start within 3s" in done["statusMessage"] and "ImagePull" in done["statusMessage"]
    assert done["error"]["code"] == -32603 and done["error"]["data"]["reason"] == "StartTimeout"
    assert "condition met" in await waiting
    finished = conditions_of(control_plane, namespace, task_id)["Finished"]
    assert (finished["status"], finished["reason"]) == ("True", "StartTimeout")
    # The condition carries no message: the McpTask keeps the words once, in statusMessage (conditions.py).
    assert "message" not in finished and finished["observedGeneration"] >= 1
    events = await reasons_become(control_plane, namespace, task_id, "JobCreated", "StartTimeout")
    assert events[1]["type"] == "Warning" and "ImagePull" in events[1]["note"], events[1]
    await until(lambda: not jobs_of(control_plane, namespace, task_id))


async def test_jobs_that_end_without_a_result_end_their_tasks(
    gateways: Gateways,
    operators: Operators,
    http_session: aiohttp.ClientSession,
    control_plane: ControlPlane,
    namespace: str,
) -> None:
    """The one outcome rule (docs/tool-runtime.md), with the embedded runner's text (tests/e2e/test_tasks.py):
    a tool that ends without a result, by any exit code, is `completed` with `isError` and its last output;
    the deadline is `failed`."""
    operators.start()
    mcp = client(http_session, await gateways.start())
    crashed = await mcp.start_task("crasher", {})
    slow = await mcp.start_task("short_deadline", {"seconds": 30})
    crash = await mcp.wait_status(crashed, "failed", "completed", timeout_s=WAIT_S)
    assert crash["status"] == "completed" and crash["result"]["isError"] is True, crash
    (job,) = jobs_of(control_plane, namespace, crashed)
    assert job["spec"]["backoffLimit"] == 0, "crasher is not idempotent: never re-run"
    text = crash["result"]["content"][0]["text"]
    assert text.startswith("Tool 'crasher' exited with code 3 without a result. Its last output:\n"), text
    assert "the disk is on fire" in text
    late = await mcp.wait_status(slow, "failed", "completed", timeout_s=WAIT_S)
    assert late["status"] == "failed" and "maximum run time of 1s" in late["statusMessage"]
    quiet = await mcp.wait_status(await mcp.start_task("silent", {}), "failed", "completed", timeout_s=WAIT_S)
    assert quiet["status"] == "completed" and quiet["result"]["isError"] is True, quiet
    assert (
        quiet["result"]["content"][0]["text"]
        == "Tool 'silent' exited with code 0 without a result. Its last output:\ngave up quietly"
    )


async def test_two_gateway_replicas_and_a_large_result_as_an_owner_only_artifact(
    gateways: Gateways, operators: Operators, http_session: aiohttp.ClientSession, tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(
        yaml.safe_dump(
            {
                "tokens": [
                    {"token": "alice", "tenant": "acme", "subject": "alice"},
                    {"token": "eve", "tenant": "evil", "subject": "eve"},
                ]
            }
        )
    )
    operators.start()
    first, second = await gateways.start(tokens_file=tokens), await gateways.start(tokens_file=tokens)
    size = 300 * 1024
    task_id = await client(http_session, first, "alice").start_task("big_result", {"size": size})
    done = await client(http_session, second, "alice").wait_status(task_id, "completed", "failed", timeout_s=WAIT_S)
    assert done["status"] == "completed", done
    assert len(json.dumps(done)) < 4096, "the McpTask holds a link, not the 300 KiB"
    link = next(block for block in done["result"]["content"] if block["type"] == "resource_link")
    read = await client(http_session, second, "alice").request("resources/read", {"uri": link["uri"]})
    assert json.loads(read.result["contents"][0]["text"])["content"][0]["text"] == "x" * size
    foreign = await client(http_session, first, "eve").request("resources/read", {"uri": link["uri"]})
    assert foreign.error["code"] == -32602


async def test_an_expired_task_is_deleted_with_its_job(
    gateways: Gateways,
    operators: Operators,
    http_session: aiohttp.ClientSession,
    control_plane: ControlPlane,
    namespace: str,
) -> None:
    operators.start()
    mcp = client(http_session, await gateways.start())
    task_id = await mcp.start_task("short_ttl", {"seconds": 0})

    async def completed_or_expired() -> str | None:
        # Its 1.5 s of `ttlMs` may pass before a loaded machine's watch shows `completed`; an unfinished task is
        # never expired (test_lifetimes.py), so "not found" is the end this test waits for too.
        reply = await mcp.get(task_id)
        if "error" in reply.body:
            return "expired" if reply.error["code"] == -32602 else None
        return "completed" if reply.result["status"] == "completed" else None

    await until(completed_or_expired, timeout_s=WAIT_S)
    await until(lambda: get_object(control_plane, namespace, task_id) is None)
    await until(lambda: not jobs_of(control_plane, namespace, task_id))


LEASE = "mcp-tasks-operator"


async def leader_gauges(session: aiohttp.ClientSession, ports: list[int]) -> list[float]:
    """`mcptasks_operator_leader` of each operator, scraped from its `/metrics`."""
    return [
        value(await scrape(session, f"http://127.0.0.1:{port}/metrics"), "mcptasks_operator_leader") for port in ports
    ]


async def the_leader(session: aiohttp.ClientSession, ports: list[int]) -> int:
    """Wait until exactly one of the operators at `ports` leads; its index."""
    gauges: list[float] = []

    async def one_leads() -> bool:
        gauges[:] = await leader_gauges(session, ports)
        return sorted(gauges) == [0.0] * (len(ports) - 1) + [1.0]

    await until(one_leads)
    return gauges.index(1.0)


async def test_two_operator_replicas_elect_one_leader_that_hands_over_at_once_when_stopped(
    gateways: Gateways,
    operators: Operators,
    http_session: aiohttp.ClientSession,
    control_plane: ControlPlane,
    namespace: str,
) -> None:
    """Leader election by a namespaced coordination.k8s.io/v1 Lease (our choice, client-go's fields): one
    replica holds it and reconciles, the other exports `mcptasks_operator_leader 0`; no task gets two Jobs.
    A leader stopped gracefully releases the Lease, so the standby takes over at once: here the Lease lasts
    120 s, longer than this test waits, so only the release can explain the take-over."""
    ports = [free_port(), free_port()]
    long_lease = {"MCPTASKS_LEADER_LEASE_DURATION_S": "120"}
    # the first replica leads (it finds no Lease); the second serves the worker API at the port pods call
    # (on this one machine pods reach one port; a Service would front every replica)
    replicas = [operators.start("--metrics-port", str(ports[0]), worker_port=free_port(), env=long_lease)]
    await until_leads(http_session, ports[0], timeout_s=WAIT_S)
    replicas.append(operators.start("--metrics-port", str(ports[1]), env=long_lease))
    mcp = client(http_session, await gateways.start())
    leader = await the_leader(http_session, ports)
    lease = kube_json(control_plane, namespace, "lease", LEASE)["spec"]
    assert lease["leaseDurationSeconds"] == 120 and lease["holderIdentity"] and lease["renewTime"]
    task_ids = [await mcp.start_task("sleeper", {"seconds": 0}) for _ in range(4)]
    for task_id in task_ids:
        assert (await mcp.wait_status(task_id, "completed", "failed", timeout_s=WAIT_S))["status"] == "completed"
        assert len(jobs_of(control_plane, namespace, task_id)) == 1

    replicas[leader].terminate()  # SIGTERM: a graceful stop
    assert replicas[leader].wait(timeout=30) == 0
    standby = 1 - leader
    await the_leader(http_session, [ports[standby]])
    after = kube_json(control_plane, namespace, "lease", LEASE)["spec"]
    assert after["leaseTransitions"] == lease["leaseTransitions"] + 1
    task_id = await mcp.start_task("sleeper", {"seconds": 0})
    assert (await mcp.wait_status(task_id, "completed", "failed", timeout_s=WAIT_S))["status"] == "completed"


async def test_a_killed_leader_is_replaced_within_the_lease_duration(
    gateways: Gateways,
    operators: Operators,
    http_session: aiohttp.ClientSession,
    control_plane: ControlPlane,
    namespace: str,
) -> None:
    """A leader that dies without releasing (SIGKILL) is replaced once its Lease expires (10 s here, as the
    standby measures it from the last renew it saw), and the new leader reconciles a task."""
    ports = [free_port(), free_port()]
    replicas = [operators.start("--metrics-port", str(ports[0]), worker_port=free_port())]
    await until_leads(http_session, ports[0], timeout_s=WAIT_S)
    replicas.append(operators.start("--metrics-port", str(ports[1])))  # at the port pods call
    mcp = client(http_session, await gateways.start())
    leader = await the_leader(http_session, ports)
    operators.kill(replicas[leader])
    duration_s = int(LEADER_ENV["MCPTASKS_LEADER_LEASE_DURATION_S"])
    retry_s = float(LEADER_ENV["MCPTASKS_LEADER_RETRY_PERIOD_S"])
    # the lease duration, a read period, and the standby's own start of leading (it lists Jobs and pods)
    await until_leads(http_session, ports[1 - leader], timeout_s=duration_s + retry_s + 10)
    task_id = await mcp.start_task("sleeper", {"seconds": 0})
    assert (await mcp.wait_status(task_id, "completed", "failed", timeout_s=WAIT_S))["status"] == "completed"
    assert len(jobs_of(control_plane, namespace, task_id)) == 1


async def until_leads(session: aiohttp.ClientSession, port: int, timeout_s: float) -> None:
    """Wait up to `timeout_s` seconds until the operator at `port` exports `mcptasks_operator_leader 1`."""

    async def leads() -> bool:
        return (await leader_gauges(session, [port])) == [1.0]

    await shared_until(leads, timeout_s=timeout_s, interval_s=0.2)


async def test_a_leader_whose_renews_are_refused_stops_acting_and_the_standby_takes_over(
    gateways: Gateways,
    operators: Operators,
    http_session: aiohttp.ClientSession,
    control_plane: ControlPlane,
    namespace: str,
    tmp_path: Path,
) -> None:
    """A replica that cannot renew its Lease (here: its account loses `update` on it, a real 403 from the
    API server) stops acting within its renew deadline while it still runs, before the Lease expires for
    the others; the standby then takes over and reconciles."""
    rendered = control_plane.helm(
        "template",
        "r",
        str(CHART),
        "--namespace",
        namespace,
        "--show-only",
        "templates/rbac.yaml",
        "--set",
        "auth.existingSecret=tokens",
    )
    control_plane.kubectl("apply", "-f", "-", input_text=rendered)
    restricted = account_kubeconfig(control_plane, namespace, "r-mcp-tasks-operator", tmp_path)
    ports = [free_port(), free_port()]
    first = operators.start("--metrics-port", str(ports[0]), kubeconfig=restricted)
    await until_leads(http_session, ports[0], timeout_s=WAIT_S)
    operators.start("--metrics-port", str(ports[1]), worker_port=free_port())
    documents = [doc for doc in yaml.safe_load_all(rendered) if doc]
    role = next(doc for doc in documents if doc["kind"] == "Role" and doc["metadata"]["name"] == "r-mcp-tasks-operator")
    for rule in role["rules"]:
        if "leases" in rule["resources"]:
            rule["verbs"] = [verb for verb in rule["verbs"] if verb != "update"]
    control_plane.kubectl("apply", "-f", "-", input_text=yaml.safe_dump(role))

    await until_stops(http_session, ports[0])
    assert first.poll() is None, "it stopped acting, not running"
    assert b"stops acting" in operators.log(first)
    await until_leads(http_session, ports[1], timeout_s=WAIT_S)
    mcp = client(http_session, await gateways.start())
    task_id = await mcp.start_task("sleeper", {"seconds": 0})
    assert (await mcp.wait_status(task_id, "completed", "failed", timeout_s=WAIT_S))["status"] == "completed"


async def until_stops(session: aiohttp.ClientSession, port: int) -> None:
    """Wait until the operator at `port` exports `mcptasks_operator_leader 0`."""

    async def stopped() -> bool:
        return (await leader_gauges(session, [port])) == [0.0]

    await until(stopped)


async def test_a_job_deleted_by_hand_reruns_idempotent_tools_and_fails_the_others(
    gateways: Gateways,
    operators: Operators,
    http_session: aiohttp.ClientSession,
    control_plane: ControlPlane,
    namespace: str,
) -> None:
    """Never a task left `working` forever, and never a second run of a tool that is not idempotent."""
    operators.start()
    mcp = client(http_session, await gateways.start())
    once = await mcp.start_task("sleeper", {"seconds": 60})
    # long enough to outlive the delete of its Job even on a loaded machine (then it must run again)
    again = await mcp.start_task("sleeper_idempotent", {"seconds": 8})
    for task_id in (once, again):
        await until(lambda t=task_id: bool(jobs_of(control_plane, namespace, t)))
        control_plane.kubectl("delete", "job", f"mcptask-{task_id}", "-n", namespace, "--cascade=background")
    # KUBE_WAIT_S: the whole test takes 10 s alone; once, with the rest of the suite beside it, this wait passed 30 s
    lost = await mcp.wait_status(once, "failed", "completed", "cancelled", timeout_s=KUBE_WAIT_S)
    assert lost["status"] == "failed" and "outcome is unknown" in lost["statusMessage"], lost
    rerun = await mcp.wait_status(again, "failed", "completed", "cancelled", timeout_s=KUBE_WAIT_S)
    assert rerun["status"] == "completed" and not rerun["result"].get("isError"), rerun
    assert rerun["result"]["content"][0]["text"] == "slept 8s on attempt 2", "the new Job's pod is run 2"
    stored = get_object(control_plane, namespace, again)
    assert stored is not None and stored["status"]["attempt"] == 2


async def test_a_local_runner_refuses_a_namespace_an_operator_serves(gateways: Gateways, operators: Operators) -> None:
    """`--runner local` next to an operator would run every task twice: the gateway refuses to start."""
    operators.start()
    refusals: list[SettingsError] = []

    async def refused() -> bool:  # the operator takes its leader Lease shortly after start
        try:
            await gateways.start(runner="local")
        except SettingsError as exc:
            refusals.append(exc)
            return True
        return False

    await until(refused, timeout_s=WAIT_S)
    assert "an operator serves namespace" in str(refusals[0])


TOOL_STATUS_CASES = """\
apiVersion: mcptasks.io/v1alpha1
kind: McpTool
metadata: {name: bad-schema}
spec:
  name: bad_schema
  description: Its inputSchema is no JSON Schema.
  inputSchema: {type: object, properties: {a: {type: nonsense}}}
  container: {image: example.org/x:1, command: [python, -c, "pass"]}
---
apiVersion: mcptasks.io/v1alpha1
kind: McpTool
metadata: {name: second-sleeper}
spec:
  name: sleeper
  description: Declares a tool name another McpTool already has.
  inputSchema: {type: object}
  container: {image: example.org/x:1, command: [python, -c, "pass"]}
"""


async def test_the_operator_writes_each_mcptools_valid_condition(
    operators: Operators, control_plane: ControlPlane, namespace: str
) -> None:
    """`kubectl get mcptools` says which tools are served and `describe` why not (API conventions)."""
    # Stays: creationTimestamp has 1 s resolution, and the duplicate must be the younger one; the API server
    # stamps it from its own clock, which no test can move.
    await asyncio.sleep(1.1)
    control_plane.kubectl("apply", "-n", namespace, "-f", "-", input_text=TOOL_STATUS_CASES)
    operators.start()

    def valid(name: str) -> dict[str, Any] | None:
        tool = kube_json(control_plane, namespace, "mcptool", name)
        found = [c for c in (tool.get("status") or {}).get("conditions", []) if c["type"] == "Valid"]
        return found[0] if found else None

    await until(lambda: all(valid(name) for name in ("bad-schema", "second-sleeper", "sleeper")))
    bad, duplicate, good = valid("bad-schema"), valid("second-sleeper"), valid("sleeper")
    assert bad is not None and duplicate is not None and good is not None
    assert (bad["status"], bad["reason"]) == ("False", "InvalidManifest") and "inputSchema" in bad["message"]
    assert (duplicate["status"], duplicate["reason"]) == ("False", "DuplicateName")
    assert (good["status"], good["reason"], good["observedGeneration"]) == ("True", "Valid", 1)
    table = control_plane.kubectl("get", "mcptools", "-n", namespace)
    assert table.splitlines()[0].split()[:3] == ["NAME", "TOOL", "VALID"]
    assert any(line.split()[:3] == ["bad-schema", "bad_schema", "False"] for line in table.splitlines())
    since = good["lastTransitionTime"]
    control_plane.kubectl(
        "patch", "mcptool", "sleeper", "-n", namespace, "--type=merge", "-p", '{"spec":{"description":"Sleeps."}}'
    )
    await until(lambda: (valid("sleeper") or {}).get("observedGeneration") == 2)
    assert valid("sleeper") == {**good, "observedGeneration": 2, "lastTransitionTime": since}


async def test_a_repeated_event_becomes_a_series_not_a_second_event(
    gateways: Gateways,
    http_session: aiohttp.ClientSession,
    control_plane: ControlPlane,
    namespace: str,
    api_client: ApiClient,
) -> None:
    """The same (task, reason, note) again updates the first Event's `series` (events.k8s.io/v1)."""
    gateway = await gateways.start()
    task_id = await client(http_session, gateway).start_task("sleeper", {"seconds": 30})
    store = gateway.store
    recorder = EventRecorder(api_client, namespace, store)
    recorder.start()
    try:
        for _ in range(3):
            recorder.emit(TaskEvent(task_id, "StartTimeout", "The tool's pod could not start", "Warning"))
    finally:
        await recorder.aclose()
    events = events_of(control_plane, namespace, task_id)
    assert len(events) == 1, events
    assert events[0]["series"]["count"] == 3 and events[0]["type"] == "Warning"
    task = get_object(control_plane, namespace, task_id)
    assert task is not None and events[0]["regarding"]["uid"] == task["metadata"]["uid"]


async def test_a_hidden_task_whose_gateway_stopped_watching_is_cancelled_by_the_operator(
    gateways: Gateways, operators: Operators, control_plane: ControlPlane, namespace: str
) -> None:
    """A synchronous or legacy-era call's hidden task is watched by the gateway waiting for it; when that
    gateway dies its watch lapses, and the operator stops the Job rather than run it for nobody."""
    operators.start()
    gateway = await gateways.start()
    tool = gateway.services.catalog.get_tool("sleeper")
    assert tool is not None
    began = utc_now() - timedelta(seconds=10)
    fresh = transitions.new_task(mint_task_id(), Owner("local", "local", "local"), tool, {"seconds": 60}, began)
    record = await gateway.store.create(hidden(fresh, watch_s=2))  # watched until 8 s ago: its caller is gone

    async def ended() -> TaskRecord | None:
        done = await gateway.store.get(record.task_id)
        return done if done.status.is_terminal else None

    done = await shared_until(
        ended, timeout_s=WAIT_S, changed=lambda: gateway.store.wait_for_change(1.0, record.task_id)
    )
    assert done.status.value == "cancelled" and "nobody can read its result" in (done.status_message or "")
    await until(lambda: not jobs_of(control_plane, namespace, record.task_id))


async def test_the_operator_does_not_count_input_waits_against_the_run_time(
    gateways: Gateways, operators: Operators, http_session: aiohttp.ClientSession, control_plane: ControlPlane
) -> None:
    """The Job has no `activeDeadlineSeconds` (it would count the wait): the reconciler enforces
    `maxRunTimeSeconds` on working time and `maxInputWaitSeconds` on one wait, from the McpTask."""
    operators.start()
    mcp = client(http_session, await gateways.start())
    answered = await mcp.start_task("patient_asker", {"seconds": 0.2})
    asked = await mcp.wait_status(answered, "input_required", timeout_s=WAIT_S)
    # Stays: 3.5 s of real time in input_required, longer than maxRunTimeSeconds (3 s), is the condition under
    # test; the operator and the tool's pod keep real time.
    await asyncio.sleep(3.5)
    (key,) = asked["inputRequests"]
    await mcp.update(answered, {key: {"action": "accept", "content": {"word": "late"}}})
    done = await mcp.wait_status(answered, "completed", "failed", timeout_s=WAIT_S)
    assert done["status"] == "completed" and done["result"]["content"][0]["text"] == "worked on late", done

    unanswered = await mcp.start_task("patient_asker", {"seconds": 0})
    ended = await mcp.wait_status(unanswered, "completed", "failed", timeout_s=WAIT_S)
    assert ended["status"] == "failed" and "maxInputWaitSeconds" in ended["statusMessage"], ended


async def test_a_pod_token_opens_only_its_own_task_on_the_worker_api(
    gateways: Gateways,
    operators: Operators,
    http_session: aiohttp.ClientSession,
    control_plane: ControlPlane,
    namespace: str,
) -> None:
    """The worker API takes a pod's projected token (audience mcp-tasks-worker, bound to the pod) for the
    task of that pod's Job only; the same account's token for another task, an unbound one or one of
    another audience reads as an unknown execution (404)."""
    operators.start()
    mcp = client(http_session, await gateways.start())
    mine = await mcp.start_task("sleeper", {"seconds": 30})
    other = await mcp.start_task("sleeper", {"seconds": 30})
    pod: dict[str, Any] = {}

    def running_pod() -> bool:
        pods = kube_json(control_plane, namespace, "pods", "-l", f"mcptasks.io/task-id={mine}")["items"]
        pod.update(pods[0] if pods and pods[0]["status"].get("phase") == "Running" else {})
        return bool(pod)

    await until(running_pod)
    bound = ["--bound-object-kind", "Pod", "--bound-object-name", pod["metadata"]["name"]]
    bound += ["--bound-object-uid", pod["metadata"]["uid"]]

    def token(*flags: str) -> str:
        return control_plane.kubectl("create", "token", "default", "-n", namespace, *flags).strip()

    async def status(task_id: str, presented: str, *more: str) -> int:
        url = f"http://127.0.0.1:{operators.port}/v1/executions/{task_id}/input"
        headers = CIMultiDict(("Authorization", f"Bearer {token}") for token in (presented, *more))
        async with http_session.get(url, headers=headers) as answer:
            return answer.status

    good = token("--audience", "mcp-tasks-worker", *bound)
    assert await status(mine, good) == 200
    assert await status(other, good) == 404, "a pod's token is no key to another task"
    assert await status(mine, token("--audience", "mcp-tasks-worker")) == 404, "not bound to the pod"
    assert await status(mine, token("--audience", "somebody-else", *bound)) == 404, "another audience"
    assert await status(mine, "not-a-token") == 404
    assert await status(mine, good, "not-a-token") == 404, "a repeated Authorization header is no credential"
    for task_id in (mine, other):
        await mcp.cancel(task_id)
