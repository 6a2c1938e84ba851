"""A leader paused past its Lease wakes to find the work done by its successor, and changes none of it
(issue 30 §4, Kubernetes): gateway + two operator replicas + API server + process node.

The pause is real: SIGSTOP on the leading operator's process, so its Lease runs out while its caches, its
queued reconciles and its open requests wait for it, exactly as a long stop-the-world pause or a frozen VM
leaves them; SIGCONT then lets it act on all of that at once.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import aiohttp

from tests.conftest import until as shared_until
from tests.controlplane.cluster import ControlPlane, free_port
from tests.kube.conftest import LEADER_ENV, Gateways, Operators, client, get_object, until
from tests.kube.test_operator import WAIT_S, jobs_of, leader_gauges, the_leader, until_leads

TASKS = 6
"""Tasks whose Jobs run when the leader stops (`gated`: each waits for one file, so all end together)."""


def _settled(stored: dict[str, Any] | None) -> dict[str, Any]:
    """What a finished McpTask says about its end: phase, attempt and result, as the API server holds it."""
    assert stored is not None
    status = stored["status"]
    return {key: status.get(key) for key in ("phase", "attempt", "result", "statusMessage")}


async def test_a_leader_paused_past_its_lease_writes_nothing_over_its_successors_work(
    gateways: Gateways,
    operators: Operators,
    http_session: aiohttp.ClientSession,
    control_plane: ControlPlane,
    namespace: str,
    tmp_path: Path,
) -> None:
    """Our rule (docs/design.md, leases and fencing): every write on behalf of a run names that run, and a
    replica that no longer holds the leader Lease acts on nothing. The leader is frozen while its tasks run;
    the standby takes the Lease once it expires, the tools finish and report through it, and every task ends
    `completed` on its first attempt with one Job. Then the old leader is woken: it must notice it lost the
    Lease (it exports `mcptasks_operator_leader 0` and says it stops acting) and leave every McpTask, Job and
    result exactly as its successor left them."""
    ports = [free_port(), free_port()]
    # the first replica leads (it finds no Lease); the second serves the worker API at the port pods call
    replicas = [operators.start("--metrics-port", str(ports[0]), worker_port=free_port())]
    await until_leads(http_session, ports[0], timeout_s=WAIT_S)
    replicas.append(operators.start("--metrics-port", str(ports[1])))
    assert await the_leader(http_session, ports) == 0
    mcp = client(http_session, await gateways.start())
    gate = tmp_path / "gate"
    task_ids = [await mcp.start_task("gated", {"gate": str(gate)}) for _ in range(TASKS)]
    for task_id in task_ids:
        await mcp.wait_status(task_id, "working", timeout_s=WAIT_S)
        await until(lambda t=task_id: bool(jobs_of(control_plane, namespace, t)))

    leader = replicas[0]
    leader.send_signal(signal.SIGSTOP)
    try:
        duration_s = int(LEADER_ENV["MCPTASKS_LEADER_LEASE_DURATION_S"])
        retry_s = float(LEADER_ENV["MCPTASKS_LEADER_RETRY_PERIOD_S"])
        await until_leads(http_session, ports[1], timeout_s=duration_s + retry_s + 10)
        gate.touch()
        ended = [await mcp.wait_status(t, "completed", "failed", "cancelled", timeout_s=WAIT_S) for t in task_ids]
        for task in ended:
            assert task["status"] == "completed", task
            assert task["result"]["content"][0]["text"] == "passed the gate on attempt 1", task
        before = {t: _settled(get_object(control_plane, namespace, t)) for t in task_ids}
    finally:
        leader.send_signal(signal.SIGCONT)

    async def stood_down() -> bool:
        said = b"this operator replica stops acting" in operators.log(leader)
        return said and (await leader_gauges(http_session, [ports[0]])) == [0.0]

    await shared_until(stood_down, timeout_s=WAIT_S, interval_s=0.2)
    # Stays: what a woken replica would wrongly do, it does from its queued work right after waking; give
    # that backlog (each reconcile a request of a few ms) a few seconds to show, since nothing it skips can
    # be waited on.
    await asyncio.sleep(3)
    for task_id in task_ids:
        assert _settled(get_object(control_plane, namespace, task_id)) == before[task_id], task_id
        assert len(jobs_of(control_plane, namespace, task_id)) == 1, task_id
    assert leader.poll() is None, "the woken replica keeps running as a standby"
    assert await the_leader(http_session, ports) == 1
