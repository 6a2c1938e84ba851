"""A tool's Job that the API server refuses (issue 21 item 6), on the real control plane.

The chart's ValidatingAdmissionPolicy (rendered by the real `helm template`, applied like `test_rbac.py`
applies it) refuses a Job whose pods run as a ServiceAccount it does not list: the task fails at once,
quoting the API server and naming the chart value. A ResourceQuota counting Jobs refuses them too (403 as
well): the task waits, its `statusMessage` and a Warning Event on the McpTask saying why, until the
operator's start deadline.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from mcp_tasks.operator import refusals
from tests.controlplane.cluster import REPO, ControlPlane
from tests.kube.conftest import Gateways, Operators, await_admission_refusal, client, until
from tests.kube.test_operator import events_of, jobs_of, reasons_become
from tests.kube.test_pod_shape import apply, mcptool
from tests.kube.test_rbac import account_kubeconfig

CHART = REPO / "charts" / "mcp-tasks"
WAIT_S = 30.0
JOB_QUOTA: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "ResourceQuota",
    "metadata": {"name": "no-jobs"},
    "spec": {"hard": {"count/jobs.batch": "0"}},
}


async def test_a_job_the_operators_admission_policy_refuses_fails_its_task_saying_what_to_do(
    monkeypatch: pytest.MonkeyPatch,
    gateways: Gateways,
    operators: Operators,
    http_session: aiohttp.ClientSession,
    control_plane: ControlPlane,
    namespace: str,
    tmp_path: Path,
) -> None:
    """Our own choice: a refusal that retrying cannot lift ends the task `failed` (`JobRefused`) instead of
    retrying for ever; the message quotes the policy and names `operator.admissionPolicy.toolServiceAccounts`,
    and a Warning Event on the McpTask says the same (what `kubectl describe mcptask` shows)."""
    chart = control_plane.helm(
        "template",
        "r",
        str(CHART),
        "--namespace",
        namespace,
        "--show-only",
        "templates/rbac.yaml",
        "--show-only",
        "templates/operator-admission-policy.yaml",
        "--set",
        "auth.existingSecret=tokens",
    )
    control_plane.kubectl("apply", "-f", "-", input_text=chart)
    operator = f"system:serviceaccount:{namespace}:r-mcp-tasks-operator"
    denied = f"ValidatingAdmissionPolicy 'r-mcp-tasks-{namespace}-operator-writes'"  # in effect before the test
    await_admission_refusal(
        control_plane, namespace, operator, denied, "create", "service", "clusterip", "probe", "--tcp=80"
    )
    apply(control_plane, namespace, mcptool("as-intruder", "env_echo", {"serviceAccountName": "intruder"}))
    monkeypatch.setenv("MCPTASKS_INSTANCE", "r")  # as the chart sets it: the policy admits release "r"'s objects
    operators.start(kubeconfig=account_kubeconfig(control_plane, namespace, "r-mcp-tasks-operator", tmp_path))
    mcp = client(http_session, await gateways.start())

    async def listed() -> bool:
        return "env_echo" in [t["name"] for t in (await mcp.request("tools/list")).result["tools"]]

    await until(listed, timeout_s=20)
    task_id = await mcp.start_task("env_echo", {"names": []})
    done = await mcp.wait_status(task_id, "failed", "completed", timeout_s=WAIT_S)
    assert done["status"] == "failed" and done["error"]["data"]["reason"] == refusals.REFUSED_REASON, done
    message = done["statusMessage"]
    assert f"ValidatingAdmissionPolicy 'r-mcp-tasks-{namespace}-operator-writes'" in message, message
    assert "operator.admissionPolicy.toolServiceAccounts" in message and "'intruder'" in message, message
    assert not jobs_of(control_plane, namespace, task_id)
    (event,) = await reasons_become(control_plane, namespace, task_id, refusals.REFUSED_REASON)
    assert event["type"] == "Warning" and event["note"] == message and "related" not in event, event


async def test_a_job_a_quota_refuses_waits_visibly_until_the_start_deadline(
    gateways: Gateways,
    operators: Operators,
    http_session: aiohttp.ClientSession,
    control_plane: ControlPlane,
    namespace: str,
) -> None:
    """Our own choice: a ResourceQuota refusal (403 like a policy's, told apart by its message) may lift when
    other Jobs end, so the task keeps `working` with the quota's message as its `statusMessage` and a
    `QuotaExceeded` Warning Event, then fails `StartTimeout` at the start deadline."""
    control_plane.kubectl("apply", "-n", namespace, "-f", "-", input_text=yaml.safe_dump(JOB_QUOTA))

    def quota_enforced() -> bool:  # the quota controller fills in `status.hard` before admission counts
        status = yaml.safe_load(control_plane.kubectl("get", "resourcequota", "no-jobs", "-n", namespace, "-o", "yaml"))
        return "count/jobs.batch" in (status.get("status") or {}).get("hard", {})

    await until(quota_enforced)
    operators.start("--start-deadline", "8")
    mcp = client(http_session, await gateways.start())
    task_id = await mcp.start_task("sleeper", {"seconds": 1})
    waiting = await mcp.wait_task(task_id, lambda t: "exceeded quota" in (t.get("statusMessage") or ""))
    assert waiting["status"] == "working", waiting
    assert "Waiting for quota" in waiting["statusMessage"] and "no-jobs" in waiting["statusMessage"], waiting

    def quota_event() -> bool:
        return any(e["reason"] == refusals.QUOTA_REASON for e in events_of(control_plane, namespace, task_id))

    await until(quota_event)
    event = next(e for e in events_of(control_plane, namespace, task_id) if e["reason"] == refusals.QUOTA_REASON)
    assert event["type"] == "Warning" and "exceeded quota" in event["note"], event
    done = await mcp.wait_status(task_id, "failed", "completed", timeout_s=WAIT_S)
    assert done["status"] == "failed" and done["error"]["data"]["reason"] == "StartTimeout", done
    assert "could not be created within 8s" in done["statusMessage"], done
    assert "exceeded quota" in done["statusMessage"], done
    assert not jobs_of(control_plane, namespace, task_id)
