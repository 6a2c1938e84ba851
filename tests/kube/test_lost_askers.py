"""A tool lost while its task waits for input (issue 30 §6, Kubernetes): gateway + operator + API server +
controller manager + process node.

The pod is deleted while the McpTask shows `input_required`, as a node drain or an eviction does it; the
question on the task then has no one left to hear its answer.
"""

from __future__ import annotations

from typing import Any

import aiohttp

from tests.controlplane.cluster import ControlPlane
from tests.kube.conftest import Gateways, Operators, client, get_object
from tests.kube.test_operator import WAIT_S, jobs_of


def _delete_pods(plane: ControlPlane, namespace: str, task_id: str) -> None:
    """Delete the pods of the task's Job at once (no grace period): the tool process is killed."""
    plane.kubectl("delete", "pods", "-n", namespace, "-l", f"job-name=mcptask-{task_id}", "--grace-period=0", "--force")


async def test_a_tool_lost_while_waiting_for_input_is_decided_by_the_outcome_rule(
    gateways: Gateways,
    operators: Operators,
    http_session: aiohttp.ClientSession,
    control_plane: ControlPlane,
    namespace: str,
) -> None:
    """Our rule (docs/design.md §7, the same as the embedded runner's): a task never waits for an answer no
    one will read. Its pod gone, the Job reports the run ended, and a tool that is not idempotent
    (`asker`) ends as any tool that ends without a result (`completed` + `isError`, as
    `test_jobs_that_end_without_a_result_end_their_tasks`), never run twice. An idempotent one
    (`hello_world`, whose Job starts its next pod by itself) is re-run: the lost run's question is
    withdrawn, the new run asks under a new key (a key is issued once in a task's life) and is attempt 2,
    so a late write of the lost pod is refused, and that answer completes it."""
    operators.start()
    mcp = client(http_session, await gateways.start())
    once = await mcp.start_task("asker", {})
    again = await mcp.start_task("hello_world", {})
    asked = {t: await mcp.wait_status(t, "input_required", timeout_s=WAIT_S) for t in (once, again)}
    for task_id in (once, again):
        _delete_pods(control_plane, namespace, task_id)

    lost = await mcp.wait_status(once, "failed", "completed", "cancelled", timeout_s=WAIT_S)
    assert lost["status"] == "completed" and lost["result"]["isError"] is True, lost
    # The cause names the exit code when the deleted pod's terminated container (SIGTERM: 143) is seen before
    # the pod is gone, as a kubelet reports it; either way the one outcome, never a second run.
    assert lost["statusMessage"] in {
        "Completed with a tool error: Tool 'asker' ended without a result",
        "Completed with a tool error: Tool 'asker' exited with code 143 without a result",
    }, lost
    (job,) = jobs_of(control_plane, namespace, once)
    assert job["spec"]["backoffLimit"] == 0 and job["status"].get("failed") == 1, "run once, never again"

    first = set(asked[again]["inputRequests"])

    def asked_anew(task: dict[str, Any]) -> bool:
        assert task["status"] in ("working", "input_required"), task
        keys = set(task.get("inputRequests") or ())
        return task["status"] == "input_required" and bool(keys) and not keys & first

    rerun = await mcp.wait_task(again, asked_anew, timeout_s=WAIT_S)
    (key,) = rerun["inputRequests"]
    stored = get_object(control_plane, namespace, again)
    assert stored is not None and stored["status"]["attempt"] == 2, "the second pod is the second run"
    assert stored["status"]["issuedInputKeys"] == [*first, key], "the lost run's key is never issued again"
    await mcp.update(again, {key: {"action": "accept", "content": {"input": "Ada"}}})
    done = await mcp.wait_status(again, "completed", "failed", "cancelled", timeout_s=WAIT_S)
    assert done["status"] == "completed" and done["result"]["content"][0]["text"] == "Hello, Ada!", done
