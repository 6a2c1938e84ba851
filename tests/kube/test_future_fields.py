"""A status field written by a newer replica leaves the McpTask readable and runnable by this version, and
is still there after this version's writes (issue 30 §3, Kubernetes): gateway + operator + API server +
process node.

The newer replica is played by what it would change: its chart's McpTask CRD lists one more status field
(the API server keeps it instead of pruning it), and it writes that field through the status subresource
of a task this version is running.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import aiohttp
import pytest
import yaml

from mcp_tasks.tasks.ids import mint_task_id
from tests.controlplane.cluster import ControlPlane
from tests.kube.conftest import Gateways, Operators, client, get_object, until

WAIT_S = 30.0
CRD: Final = "mcptasks.mcptasks.io"
FUTURE_FIELD: Final = "futureField"
FUTURE_SCHEMA_PATH: Final = f"/spec/versions/0/schema/openAPIV3Schema/properties/status/properties/{FUTURE_FIELD}"
WRITTEN: Final = "written by a newer replica"


@pytest.fixture
def newer_crd(control_plane: ControlPlane) -> Iterator[None]:
    """The McpTask CRD as a newer chart installs it (`status.futureField` listed), for this test only: the
    field is removed again after it, so the session's other tests see this version's CRD."""
    added = {"op": "add", "path": FUTURE_SCHEMA_PATH, "value": {"type": "string", "description": "a newer field"}}
    control_plane.kubectl("patch", "crd", CRD, "--type=json", "-p", json.dumps([added]))
    try:
        yield
    finally:
        removed = {"op": "remove", "path": FUTURE_SCHEMA_PATH}
        control_plane.kubectl("patch", "crd", CRD, "--type=json", "-p", json.dumps([removed]))


async def test_a_status_field_of_a_newer_replica_leaves_the_task_served_and_run_and_is_kept(
    newer_crd: None,
    gateways: Gateways,
    operators: Operators,
    http_session: aiohttp.ClientSession,
    control_plane: ControlPlane,
    namespace: str,
    tmp_path: Path,
) -> None:
    """Our rule for rolling upgrades (issue 30 §3, docs/design.md): an older replica reads McpTasks
    tolerantly and never drops a status field it did not write. While this version's operator runs a task
    that waits for input, a newer replica writes a status field this version does not know; this version's
    gateway still answers the owner (another principal: as an unknown id), the answer reaches the tool, the
    operator records its real result, and the field is still in the McpTask's status afterwards."""
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
    gateway = await gateways.start(tokens_file=tokens)
    alice, eve = client(http_session, gateway, "alice"), client(http_session, gateway, "eve")
    task_id = await alice.start_task("confirm_delete", {"filename": "report.pdf"})
    asked = await alice.wait_status(task_id, "input_required", "completed", "failed", timeout_s=WAIT_S)
    assert asked["status"] == "input_required", asked

    def written() -> bool:  # re-sent until the API server serves the newer CRD (it keeps the field, not prunes it)
        patch = json.dumps({"status": {FUTURE_FIELD: WRITTEN}})
        control_plane.kubectl(
            "patch", "mcptask", task_id, "-n", namespace, "--subresource=status", "--type=merge", "-p", patch
        )
        stored = get_object(control_plane, namespace, task_id)
        return stored is not None and stored["status"].get(FUTURE_FIELD) == WRITTEN

    await until(written, timeout_s=WAIT_S)

    async def served() -> dict[str, Any] | None:  # once the gateway's watch has brought the newer object
        cached = await gateway.store.raw(task_id)
        if cached is None or cached.get("status", {}).get(FUTURE_FIELD) != WRITTEN:
            return None
        return (await alice.get(task_id)).result

    after_newer = await until(served, timeout_s=WAIT_S)
    assert after_newer["status"] == "input_required", after_newer
    assert after_newer["inputRequests"] == asked["inputRequests"]
    foreign, unknown = await eve.get(task_id), await eve.get(mint_task_id())
    assert (foreign.status, foreign.error) == (unknown.status, unknown.error)

    answered = await alice.update(task_id, {"confirm": {"action": "accept", "content": {"confirm": True}}})
    assert answered.status == 200, answered.body
    done = await alice.wait_status(task_id, "completed", "failed", "cancelled", timeout_s=WAIT_S)
    assert done["status"] == "completed" and not done["result"].get("isError"), done
    assert done["result"]["content"][0]["text"] == "Deleted report.pdf"

    finished = get_object(control_plane, namespace, task_id)
    assert finished is not None
    assert finished["status"]["taskStatus"] == "completed" and finished["status"].get(FUTURE_FIELD) == WRITTEN, (
        finished["status"]
    )
    for log in operators.processes:
        assert b"malformed" not in operators.log(log), "the operator read the McpTask as this version does"
