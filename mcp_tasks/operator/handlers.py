"""The kopf side of the operator: kopf watches Jobs and pods of tool runs, and the pods of warm workers
(`warm_tools.WarmTools`), and carries kopf's settings.

Each handler only records the object in the reconciler's copies (`Children`) and queues its task's id
(`WorkQueue.add`); the decision is the reconcile's, from current state. McpTasks are not watched here:
the McpTask store's own watch feeds the queue (`KubernetesTaskStore.add_change_listener`), so each
kind is watched once per process.

Only `@kopf.on.event` handlers, and async ones (kopf runs sync handlers in threads; the queue is
not thread-safe): they add no finalizers (deleting an McpTask or a Job never waits for
the operator), keep no handler progress, and return nothing, so kopf writes nothing into any object.
kopf runs standalone in every replica (no peering objects, no cluster-wide kopf CRDs), so every replica
keeps current copies; what acts on them (the reconcile workers, the warm tools, the resync and the
sweep) runs only in the replica that holds the leader Lease (`leadership.LeaderElection`). The worker
API runs on every replica, which is safe because every task write is compare-and-swap.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from mcp_tasks.operator.labels import TOOL_RUN_LABELS, WARM_LABELS
from mcp_tasks.operator.reconciler import Reconciler
from mcp_tasks.operator.warm_tools import WarmTools

logger = logging.getLogger("mcp_tasks.operator")


def build_registry(
    reconciler: Reconciler,
    warm_tools: WarmTools,
    connection: kopf.ConnectionInfo | None,
) -> kopf.OperatorRegistry:
    """A kopf registry wired to `reconciler` (tool runs) and `warm_tools` (warm workers' pods), standalone.

    kopf logs in with `connection`, or, when it is `None` (in a pod), with the pod's service-account
    token, re-read as the kubelet rotates it.
    """
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        if connection is None:
            return kopf.login_with_service_account(**kwargs)
        return connection

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.level = logging.WARNING  # no Event per INFO line: tasks are many
        settings.peering.standalone = True  # leadership is the Lease's (operator/leadership.py)
        # One namespace, named: nothing to discover. Scanning would list namespaces and CRDs cluster-wide,
        # which the operator's Role does not grant; kopf then retries for about a minute before it
        # falls back, and every watch waits for it.
        settings.scanning.disabled = True
        settings.watching.server_timeout = 300
        settings.networking.request_timeout = 60

    @kopf.on.event("batch", "v1", "jobs", labels=TOOL_RUN_LABELS, registry=registry)
    async def job_event(type: str | None, body: kopf.Body, **_: Any) -> None:  # kopf's name
        task_id = reconciler.children.job_event(type or "ADDED", dict(body))
        if task_id is not None:
            reconciler.queue.add(task_id)
            reconciler.admission.wake()  # a Job that ends frees a slot

    @kopf.on.event("", "v1", "pods", labels=TOOL_RUN_LABELS, registry=registry)
    async def pod_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        task_id = reconciler.children.pod_event(type or "ADDED", dict(body))
        if task_id is not None:
            reconciler.queue.add(task_id)
            reconciler.admission.wake()

    @kopf.on.event("", "v1", "pods", labels=WARM_LABELS, registry=registry)
    async def warm_pod_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        warm_tools.pod_event(type or "ADDED", dict(body))

    return registry
