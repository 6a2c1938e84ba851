"""The operator's pure parts: the Job it builds (no Secret: a projected token), and how it reads Job and Pod status."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_tasks.operator import observe
from mcp_tasks.operator.jobs import WORKER_TOKEN_AUDIENCE, build_job, object_name
from mcp_tasks.operator.settings import OperatorSettings
from mcp_tasks.tasks.tools import ToolSpec
from tests.unit.manifests import tool_spec

TASK: dict[str, Any] = {
    "apiVersion": "mcptasks.io/v1alpha1",
    "kind": "McpTask",
    "metadata": {"name": "a" * 32, "namespace": "ns", "uid": "u-1", "labels": {"mcptasks.io/tool": "t"}},
}


def tool(**execution: Any) -> ToolSpec:
    container = {"image": "example.org/t:1", "command": ["run"], "env": [{"name": "A", "value": "1"}]}
    return tool_spec(container, **execution)


def test_a_job_runs_the_image_with_the_runtime_contract_and_least_privilege() -> None:
    job = build_job(
        TASK, tool(maxRunTimeSeconds=90.5, cancelGraceSeconds=3), OperatorSettings(worker_url="http://op:8081/")
    )
    assert job["metadata"]["name"] == object_name(TASK["metadata"]["name"]) == "mcptask-" + "a" * 32
    assert job["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    spec = job["spec"]
    assert "activeDeadlineSeconds" not in spec, "it would count waits for input; the reconciler enforces the limits"
    assert spec["backoffLimit"] == 0
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and pod["terminationGracePeriodSeconds"] == 3
    assert pod["automountServiceAccountToken"] is False and pod["securityContext"]["runAsNonRoot"] is True
    container = pod["containers"][0]
    env = {item["name"]: item for item in container["env"]}
    assert env["MCPTASKS_WORKER_URL"]["value"] == "http://op:8081/v1/executions/" + "a" * 32
    assert "MCPTASKS_WORKER_TOKEN" not in env, "no Secret per task: the pod presents its projected token"
    token_file = env["MCPTASKS_WORKER_TOKEN_FILE"]["value"]
    (projected,) = [v["projected"] for v in pod["volumes"] if "projected" in v]
    (source,) = projected["sources"]
    assert source["serviceAccountToken"]["audience"] == WORKER_TOKEN_AUDIENCE
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "worker-token"]
    assert token_file == mount["mountPath"] + "/" + source["serviceAccountToken"]["path"] and mount["readOnly"]
    assert env["A"]["value"] == "1"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert spec["template"]["metadata"]["labels"]["mcptasks.io/task-id"] == "a" * 32


def test_a_traced_task_passes_its_trace_context_to_the_pod() -> None:
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    traced = build_job(TASK, tool(), OperatorSettings(), parent)["spec"]["template"]["spec"]["containers"][0]["env"]
    plain = build_job(TASK, tool(), OperatorSettings())["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "TRACEPARENT", "value": parent} in traced
    assert "TRACEPARENT" not in [item["name"] for item in plain]


def test_only_idempotent_tools_are_retried() -> None:
    settings = OperatorSettings(idempotent_retries=4)
    assert build_job(TASK, tool(idempotent=True), settings)["spec"]["backoffLimit"] == 4
    assert build_job(TASK, tool(idempotent=False), settings)["spec"]["backoffLimit"] == 0


def test_a_tool_without_an_image_cannot_run_on_kubernetes() -> None:
    embedded_only = tool()
    object.__setattr__(embedded_only.manifest.container, "image", None)
    with pytest.raises(ValueError, match=r"no container\.image"):
        build_job(TASK, embedded_only, OperatorSettings())


def condition(kind: str, reason: str = "", status: str = "True") -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": f"{kind} because {reason}"}


def test_job_outcomes() -> None:
    assert observe.job_outcome({"status": {}}) is None
    assert observe.job_outcome({"status": {"conditions": [condition("Complete")]}}) == observe.JobOutcome(
        "succeeded", "Complete", "Complete because "
    )
    failing = observe.job_outcome({"status": {"conditions": [condition("FailureTarget", "DeadlineExceeded")]}})
    assert failing is not None and (failing.kind, failing.reason) == ("failed", "DeadlineExceeded")
    assert observe.job_outcome({"status": {"conditions": [condition("Failed", "X", status="False")]}}) is None


def test_pods_that_cannot_start_and_terminations() -> None:
    waiting = {
        "status": {
            "phase": "Pending",
            "containerStatuses": [{"state": {"waiting": {"reason": "ImagePullBackOff", "message": "back-off"}}}],
        }
    }
    assert observe.start_problem(waiting) == "ImagePullBackOff: back-off"
    unschedulable = {
        "status": {
            "phase": "Pending",
            "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes"}
            ],
        }
    }
    assert observe.start_problem(unschedulable) == "Unschedulable: 0/3 nodes"
    creating = {
        "status": {"phase": "Pending", "containerStatuses": [{"state": {"waiting": {"reason": "ContainerCreating"}}}]}
    }
    assert observe.start_problem(creating) is None
    ended = {
        "status": {
            "phase": "Failed",
            "containerStatuses": [{"state": {"terminated": {"exitCode": 3, "message": "x" * 5000}}}],
        }
    }
    termination = observe.termination(ended)
    assert termination is not None and termination.exit_code == 3 and len(termination.message) == 4096
    killed = {"status": {"containerStatuses": [{"state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}}
    assert observe.termination(killed) == observe.Termination(137, "", "OOMKilled")
    assert not observe.is_running(ended) and observe.is_running(waiting)
