"""Authenticated warm workers on the real control plane: the operator's warm Deployment pods (the process
node runs them as local processes, reachable at their pod address like any pod of the namespace).

Our choice (issue 21 item 1; docs/security.md): the pods hold only the public half of the operator's
warm-call key (in their pod template); the operator (tasks) and the gateways (synchronous calls) mint
each call's credential with the private half. Anyone else who reaches a pod gets 401 before any tool code
runs (asserted through the file `warm_sleeper` creates when it runs) and takes no slot; `/healthz` stays open.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp

from mcp_tasks.worker.warm_auth import WarmCallSigner
from tests.conftest import PLAIN_CAPS
from tests.controlplane.cluster import ControlPlane
from tests.kube.conftest import Gateways, Operators, client, until
from tests.kube.test_warm_tools import WAIT_S, apply_warm, endpoints, kube_json, warm_namespace
from tests.warm_attacks import CALLER, UNAUTHORIZED, bearer, call_body, health, post, refused_requests, squat

__all__ = ["warm_namespace"]  # the fixture, shared with the warm-tool tests

TOOL = "warm_sleeper_idempotent"
MCPTOOL = "warm-sleeper-idempotent"


async def test_a_warm_pod_refuses_outsiders_and_serves_the_gateway_and_the_operator(
    operators: Operators,
    gateways: Gateways,
    control_plane: ControlPlane,
    warm_namespace: str,
    http_session: aiohttp.ClientSession,
    tmp_path: Path,
) -> None:
    namespace = warm_namespace
    apply_warm(control_plane, namespace, MCPTOOL)
    operators.start()
    gateway = await gateways.start()
    catalog: Any = gateway.services.catalog
    await until(lambda: len(endpoints(control_plane, namespace, MCPTOOL)) == 1)
    (endpoint,) = endpoints(control_plane, namespace, MCPTOOL)
    base_url = f"http://{endpoint}"
    # the operator's key (the data folder it shares with the gateways here; the chart's Secret in a cluster)
    signer = WarmCallSigner.from_pem((tmp_path / "warm-call.key").read_bytes())

    deployment = kube_json(control_plane, namespace, "deployment", "mcptool-" + MCPTOOL)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert env["MCPTASKS_SERVE_CALL_KEY"] == signer.public_pem
    assert "PRIVATE KEY" not in str(deployment), "the pods hold the public half only"

    marker = tmp_path / "outsider-ran"
    answers = await refused_requests(http_session, base_url, signer, TOOL, marker)
    assert {name: (a.status, a.body) for name, a in answers.items()} == dict.fromkeys(answers, (401, UNAUTHORIZED))
    assert await squat(http_session, base_url, TOOL, marker, 20) == [401] * 20
    assert (await health(http_session, base_url)).body == {"status": "ok", "calls": 0, "concurrency": 1}
    assert not marker.exists(), "the tool ran for an outsider"

    # the gateway's synchronous call reaches the pod (no hidden task, no McpTask), signed by the gateway
    await until(lambda: bool(catalog.warm_endpoints(TOOL)))
    mcp = client(http_session, gateway)
    served = tmp_path / "gateway-ran"
    reply = (await mcp.call_tool(TOOL, {"seconds": 0, "started": str(served)}, caps=PLAIN_CAPS)).result
    assert reply["content"][0]["text"].startswith("slept"), reply
    assert served.exists() and kube_json(control_plane, namespace, "mcptasks")["items"] == []

    # a task runs on the pod under the operator's lease, with the operator's credential
    task_ran = tmp_path / "task-ran"
    task_id = await mcp.start_task(TOOL, {"seconds": 0, "started": str(task_ran)})
    done = await mcp.wait_status(task_id, "completed", "failed", timeout_s=WAIT_S)
    assert done["status"] == "completed" and done["result"]["content"][0]["text"].startswith("slept"), done
    assert task_ran.exists()

    # and a call minted with the operator's key, sent directly, runs once
    legit = tmp_path / "legit-ran"
    body = call_body(TOOL, "legit-1", legit)
    warm = await signer.open_session(http_session, base_url, TOOL)
    answer = await post(http_session, base_url, body, bearer(warm.credential("call", "legit-1", CALLER, body)))
    assert (answer.status, answer.body["event"]) == (200, "result") and legit.exists()
