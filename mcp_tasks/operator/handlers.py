"""The kopf side of the operator: which watch events reach the `Reconciler`, and kopf's settings.

Only `@kopf.on.event` handlers: they add no finalizers (deleting an McpTask never waits for the
operator), keep no handler progress, and return nothing, so kopf writes nothing into `status`; every
status change goes through the McpTask store (compare-and-swap on the status subresource). kopf's
peering runs one active replica at a time (random priorities, so replicas never freeze each other);
the worker API and the sweep run on every replica, which is safe because every write is CAS.
"""

from __future__ import annotations

import logging
import random
from typing import Any

import kopf

from mcp_tasks.observability.logs import task_context
from mcp_tasks.operator.jobs import TASK_ID_LABEL
from mcp_tasks.operator.reconciler import Reconciler
from mcp_tasks.store.kubernetes.resources import GROUP, MANAGED_BY, MANAGED_BY_LABEL, TASK_PLURAL, VERSION

logger = logging.getLogger("mcp_tasks.operator")

TOOL_RUN_LABELS = {MANAGED_BY_LABEL: MANAGED_BY, "app.kubernetes.io/component": "tool-run"}


def build_registry(
    reconciler: Reconciler, connection: kopf.ConnectionInfo | None, peering: str
) -> kopf.OperatorRegistry:
    """A kopf registry wired to `reconciler`, peering under `peering`.

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
        settings.peering.name = peering
        settings.peering.priority = random.randint(1, 2**31 - 1)  # not a secret: distinct priorities
        settings.peering.mandatory = True
        settings.peering.clusterwide = False
        settings.watching.server_timeout = 300
        settings.networking.request_timeout = 60

    @kopf.on.event(GROUP, VERSION, TASK_PLURAL, registry=registry)
    async def task_event(type: str | None, body: kopf.Body, **_: Any) -> None:  # kopf's name
        with task_context(str(body.get("metadata", {}).get("name")), body.get("spec", {}).get("tool")):
            await reconciler.task_event(type or "ADDED", dict(body))

    @kopf.on.event("batch", "v1", "jobs", labels=TOOL_RUN_LABELS, registry=registry)
    async def job_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        if type != "DELETED":
            with task_context(_task_of(body)):
                await reconciler.job_event(dict(body))

    @kopf.on.event("", "v1", "pods", labels=TOOL_RUN_LABELS, registry=registry)
    async def pod_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        with task_context(_task_of(body)):
            await reconciler.pod_event(type or "ADDED", dict(body))

    return registry


def _task_of(body: kopf.Body) -> str:
    """The task id a Job or Pod of a tool run is labelled with (for the log lines about it)."""
    return str((body.get("metadata", {}).get("labels") or {}).get(TASK_ID_LABEL, ""))
