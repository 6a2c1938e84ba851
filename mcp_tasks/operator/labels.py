"""Labels, selectors and owner references of every object the operator creates: one place for each.

Tool-run Jobs and pods (`run_labels`) and warm tools' Deployments, Services, HPAs and pods (`warm_labels`)
carry `app.kubernetes.io/managed-by` and `app.kubernetes.io/component`, which the operator's watches and
listings select on, plus what links them to their McpTask, McpTool or McpServer; each has a controller owner
reference (`owner_reference`) so garbage collection deletes it with its owner. The McpTask's own labels
(tenant, tool) are the store's (`store.kubernetes.resources`).
"""

from __future__ import annotations

from typing import Final

from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.store.kubernetes.resources import MANAGED_BY, MANAGED_BY_LABEL, TENANT_LABEL, TOOL_LABEL, label_value

COMPONENT_LABEL: Final = "app.kubernetes.io/component"
INSTANCE_LABEL: Final = "app.kubernetes.io/instance"
"""The Helm release whose NetworkPolicy lets a pod reach the worker API."""
TASK_ID_LABEL: Final = "mcptasks.io/task-id"
FIRST_ATTEMPT_ANNOTATION: Final = "mcptasks.io/first-attempt"
"""On a task's Job: the attempt its first pod runs (the task's runs before the Job, plus one); its next pods,
started by the Job controller after a failure, run the attempts after it (`operator.credentials`)."""
MCPTOOL_LABEL: Final = "mcptasks.io/mcptool"
"""Names the McpTool a warm object belongs to."""
MCPSERVER_LABEL: Final = "mcptasks.io/mcp-server"
"""Names the McpServer a discovery Job or a warm object (of one of its tools, with `TOOL_LABEL`) belongs to."""

TOOL_RUN_LABELS: Final = {MANAGED_BY_LABEL: MANAGED_BY, COMPONENT_LABEL: "tool-run"}
"""The labels every Job and pod of a tool run carries (what the operator watches and lists)."""
TOOL_RUN_SELECTOR: Final = ",".join(f"{key}={value}" for key, value in TOOL_RUN_LABELS.items())
WARM_LABELS: Final = {MANAGED_BY_LABEL: MANAGED_BY, COMPONENT_LABEL: "warm-worker"}
"""The labels of every Deployment, Service, HPA and pod of a warm tool (what the operator watches and lists)."""
WARM_SELECTOR: Final = ",".join(f"{key}={value}" for key, value in WARM_LABELS.items())


def owner_reference(owner: JsonObject) -> JsonObject:
    """Controller owner reference to `owner` (an McpTask or McpTool as read from the API server): garbage
    collection deletes the child with it, and `blockOwnerDeletion` keeps a foreground delete waiting for it.
    """
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _with_instance(labels: dict[str, str], instance: str | None) -> dict[str, str]:
    if instance:
        labels[INSTANCE_LABEL] = instance
    return labels


def run_labels(task: JsonObject, tool: str, instance: str | None = None) -> dict[str, str]:
    """Labels of a tool run's Job and pod: `TOOL_RUN_LABELS`, its task id, the task's tool and tenant labels
    (and, given `instance`, the Helm release's).
    """
    task_labels = task["metadata"].get("labels") or {}
    child = {
        **TOOL_RUN_LABELS,
        TASK_ID_LABEL: task["metadata"]["name"],
        TOOL_LABEL: task_labels.get(TOOL_LABEL, tool[:63]),
    }
    if TENANT_LABEL in task_labels:
        child[TENANT_LABEL] = task_labels[TENANT_LABEL]
    return _with_instance(child, instance)


def warm_labels(mcptool: str, tool: str, instance: str | None = None, kind: str = "McpTool") -> dict[str, str]:
    """Labels of the warm objects of `tool` (its MCP name) declared by `mcptool`, the name of an McpTool or,
    with `kind` `McpServer`, of the McpServer that lists it: `WARM_LABELS`, the owner (`MCPTOOL_LABEL` or
    `MCPSERVER_LABEL`) and the tool (each hashed when not a valid label value), and given `instance` the
    Helm release's.
    """
    owner = MCPSERVER_LABEL if kind == "McpServer" else MCPTOOL_LABEL
    labels = {**WARM_LABELS, owner: label_value(mcptool), TOOL_LABEL: label_value(tool)}
    return _with_instance(labels, instance)


def warm_selector(labels: dict[str, str]) -> dict[str, str]:
    """The labels of `warm_labels` that select one warm tool's pods (a Deployment's immutable selector): the
    component and the McpTool, or, for an McpServer's tool, the component, the McpServer and the tool.
    """
    keys = (MCPTOOL_LABEL,) if MCPTOOL_LABEL in labels else (MCPSERVER_LABEL, TOOL_LABEL)
    return {COMPONENT_LABEL: labels[COMPONENT_LABEL], **{key: labels[key] for key in keys}}


def warm_pool(labels: dict[str, str]) -> str | None:
    """The warm tool a warm object or pod with `labels` belongs to (`mcptool/<label>` or
    `mcpserver/<label>/<tool label>`), or `None` for one with neither owner label.
    """
    if MCPTOOL_LABEL in labels:
        return f"mcptool/{labels[MCPTOOL_LABEL]}"
    if MCPSERVER_LABEL in labels and TOOL_LABEL in labels:
        return f"mcpserver/{labels[MCPSERVER_LABEL]}/{labels[TOOL_LABEL]}"
    return None
