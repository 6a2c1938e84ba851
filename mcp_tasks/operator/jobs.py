"""What the operator creates for one McpTask: its Job. Pure functions.

The name is deterministic (`mcptask-<taskId>`), so a handler that runs twice, or an operator restarted
mid-create, finds the existing Job (409 is success) and never makes a second one. It carries an owner
reference to the McpTask, so deleting the task (expiry) removes it through the garbage collector.
The Job runs the tool's image with the tool runtime contract's environment (`runtime.contract`), a
restrictive security context, and retries only for tools declared idempotent. The pod proves which
task it runs with a projected ServiceAccount token of audience `WORKER_TOKEN_AUDIENCE`, bound to the
pod (`credentials.PodIdentity`): no Secret per task. When the worker API serves HTTPS, the same volume
holds its CA (`ca.crt` of `worker_ca_secret`) and `MCPTASKS_WORKER_CA_FILE` names it.
It has no `activeDeadlineSeconds`: that would count time spent waiting for input, which
`maxRunTimeSeconds` does not; the reconciler enforces both limits from the McpTask instead.
"""

from __future__ import annotations

import math
from typing import Any, Final

from mcp_tasks.observability.tracing import ENV_TRACEPARENT
from mcp_tasks.operator import pods
from mcp_tasks.operator.labels import FIRST_ATTEMPT_ANNOTATION, owner_reference, run_labels
from mcp_tasks.operator.settings import OperatorSettings
from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.runtime import contract
from mcp_tasks.tasks.tools import ToolSpec

PREFIX: Final = "mcptask-"
WORKER_TOKEN_AUDIENCE: Final = "mcp-tasks-worker"
"""Audience of the projected ServiceAccount token a tool pod presents to the worker API."""
TOKEN_DIR: Final = "/var/run/secrets/mcp-tasks"
"""Where the pod's worker token is mounted (file `token`; the kubelet rotates it)."""
TOKEN_LIFETIME_S: Final = 3600
"""`expirationSeconds` of the projected token (the kubelet renews it at 80% of its life)."""


CA_FILE: Final = "ca.crt"
"""The worker API's CA in the pod's `TOKEN_DIR` (only with `worker_ca_secret`): the one key of that Secret mounted."""


def _ca_source(settings: OperatorSettings) -> list[JsonObject]:
    """The projected-volume source of the worker API's CA (`ca.crt` of `worker_ca_secret` only, never its
    key), or none without TLS.
    """
    if not settings.worker_ca_secret:
        return []
    return [{"secret": {"name": settings.worker_ca_secret, "items": [{"key": CA_FILE, "path": CA_FILE}]}}]


def object_name(task_id: str) -> str:
    """Name of the task's Job: `mcptask-<taskId>` (40 characters for a 32-hex taskId)."""
    return PREFIX + task_id


def build_job(
    task: JsonObject, tool: ToolSpec, settings: OperatorSettings, traceparent: str | None = None
) -> JsonObject:
    """The Job that runs `tool` for `task`.

    Raises:
        ValueError: the tool declares no `container.image` (it can only run embedded).
    """
    task_id = task["metadata"]["name"]
    name = object_name(task_id)
    execution = tool.execution
    env: list[dict[str, Any]] = [
        {"name": contract.ENV_WORKER_URL, "value": f"{settings.pod_worker_url.rstrip('/')}/v1/executions/{task_id}"},
        {"name": contract.ENV_WORKER_TOKEN_FILE, "value": f"{TOKEN_DIR}/token"},
        *(
            [{"name": contract.ENV_WORKER_CA_FILE, "value": f"{TOKEN_DIR}/{CA_FILE}"}]
            if settings.worker_ca_secret
            else []
        ),
        {"name": contract.ENV_TASK_ID, "value": task_id},
        *pods.declared_env(tool),
        *([{"name": ENV_TRACEPARENT, "value": traceparent}] if traceparent else []),
    ]
    container = pods.tool_container(tool, env, ({"name": "worker-token", "mountPath": TOKEN_DIR, "readOnly": True},))
    pods.shape_container(container, tool, settings.tool_defaults)
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": math.ceil(execution.cancel_grace_seconds),
        "securityContext": pods.pod_security_context(),
        "containers": [container],
        "volumes": [
            pods.tmp_volume(),
            {
                "name": "worker-token",
                "projected": {
                    "sources": [
                        {
                            "serviceAccountToken": {
                                "audience": WORKER_TOKEN_AUDIENCE,
                                "expirationSeconds": TOKEN_LIFETIME_S,
                                "path": "token",
                            }
                        },
                        *_ca_source(settings),
                    ]
                },
            },
        ],
    }
    # Named even when it is the namespace's `default`: a projected token needs an explicit account (the
    # API server refuses one otherwise when its ServiceAccount admission does not fill the name in).
    pod_spec["serviceAccountName"] = settings.service_account or "default"
    pods.shape_pod(pod_spec, tool, settings.tool_defaults)  # the tool's own account, if it names one, wins
    job_labels = run_labels(task, tool.name, settings.instance)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": task["metadata"]["namespace"],
            "labels": job_labels,
            "annotations": {FIRST_ATTEMPT_ANNOTATION: str(int((task.get("status") or {}).get("attempt") or 0) + 1)},
            "ownerReferences": [owner_reference(task)],
        },
        "spec": {
            "backoffLimit": settings.idempotent_retries if execution.idempotent else 0,
            "ttlSecondsAfterFinished": settings.job_ttl_after_finished_s,
            "podReplacementPolicy": "Failed",
            "template": {"metadata": {"labels": job_labels}, "spec": pod_spec},
        },
    }
