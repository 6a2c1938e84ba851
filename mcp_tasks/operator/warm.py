"""What the operator runs for a warm tool (`spec.warm`): a Deployment, a Service, optionally an HPA. Pure functions.

A warm tool is an McpTool with `spec.warm`, or a tool listed by an McpServer with `spec.warm` (one pool per
server tool, as embedded: docs/mcp-servers.md §6). Each object is named after its McpTool (`warm_name`), or
its McpServer and tool (`server_warm_name`), carries a controller owner reference to that object (deleting
it removes them through the garbage collector) and is applied server-side, so an edit updates them in
place. The pods run the tool's image with its command and the warm-worker variables
(`runtime.contract.ENV_SERVE_*`, among them the public half of the operator's warm-call key, with which
they refuse every call, re-attach and cancel not signed by the operator or a gateway), the same
restricted security profile as a task's Job, no Kubernetes credentials and no worker token (a
synchronous call needs no worker API), and a readiness probe on `/healthz` (open). A server tool's pod is
its per-call Job's pod (`server_jobs.server_tool_pod`: the unmodified server as a native sidecar, FIFOs for
stdio) with the bridge serving those variables. `pod_endpoint` tells which pods may take calls: the
operator publishes them in the owner's `status.warm`, and the gateways send synchronous calls straight to
them.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from typing import Any, Final

from mcp_tasks.operator import pods
from mcp_tasks.operator.labels import owner_reference, warm_labels, warm_selector
from mcp_tasks.operator.server_jobs import server_tool_pod
from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.runtime import contract
from mcp_tasks.store.kubernetes.resources import label_value
from mcp_tasks.tasks.pod_shape import ToolDefaults
from mcp_tasks.tasks.servers import ServerToolSpec
from mcp_tasks.tasks.tools import ToolSpec

FIELD_MANAGER: Final = "mcp-tasks-operator"
"""The server-side apply field manager of the objects the operator owns."""
_NAME_PREFIX: Final = "mcptool-"
_SERVER_PREFIX: Final = "mcpserver-"
_DNS_LABEL_MAX: Final = 63
_NOT_DNS: Final = re.compile(r"[^a-z0-9-]")


def _dns_label(name: str, raw: str) -> str:
    """`name` when it is a DNS-1035 label spelt as `raw` was; else a cleaned, cut name with a hash of `raw`."""
    cleaned = _NOT_DNS.sub("-", name.lower())
    if cleaned == name and len(name) <= _DNS_LABEL_MAX and not name.endswith("-"):
        return name
    digest = hashlib.sha256(raw.encode()).hexdigest()[:8]
    return f"{cleaned[: _DNS_LABEL_MAX - 9].rstrip('-')}-{digest}"


def warm_name(mcptool: str) -> str:
    """The Deployment/Service/HPA name of McpTool `mcptool`: `mcptool-<name>`, a DNS-1035 label (a Service
    name must be one). A name with dots (`a.b`, which would become `a-b`) or past 63 characters gets a
    hash suffix, so two McpTools never share one.
    """
    return _dns_label(_NAME_PREFIX + mcptool, mcptool)


def server_warm_name(server: str, tool: str) -> str:
    """The warm objects' name of McpServer `server`'s tool `tool` (its name on the server):
    `mcpserver-<server>-<tool>`, with a hash suffix when the tool's name is not DNS-1035 (`get_current_time`)
    or the whole is past 63 characters.
    """
    return _dns_label(f"{_SERVER_PREFIX}{server}-{tool}", f"{server}/{tool}")


def mcptool_label(mcptool: str) -> str:
    """The `mcptasks.io/mcptool` label value of McpTool `mcptool`'s warm objects (hashed when too long)."""
    return label_value(mcptool)


def object_name(owner: JsonObject, tool: ToolSpec) -> str:
    """The name of the warm objects of `tool`, declared by `owner` (its McpTool, or the McpServer listing it)."""
    if isinstance(tool, ServerToolSpec):
        return server_warm_name(str(owner["metadata"]["name"]), tool.server_tool_name)
    return warm_name(str(owner["metadata"]["name"]))


def object_labels(owner: JsonObject, tool: ToolSpec, instance: str | None) -> dict[str, str]:
    """`labels.warm_labels` of `tool`'s warm objects, declared by `owner` (an McpTool or an McpServer)."""
    kind = "McpServer" if isinstance(tool, ServerToolSpec) else "McpTool"
    return warm_labels(str(owner["metadata"]["name"]), tool.name, instance, kind)


def _metadata(owner: JsonObject, tool: ToolSpec, instance: str | None) -> JsonObject:
    return {
        "name": object_name(owner, tool),
        "namespace": owner["metadata"]["namespace"],
        "labels": object_labels(owner, tool, instance),
        "ownerReferences": [owner_reference(owner)],
    }


TLS_DIR: Final = "/var/run/secrets/mcp-tasks"
"""Where a warm pod finds its serving certificate (`tls.crt`, `tls.key`) and the worker API's CA (`ca.crt`)."""
TLS_VOLUME: Final = "mcptasks-tls"


@dataclass(frozen=True, slots=True)
class PodTls:
    """TLS of warm pods (the chart's `tls.*`): their serving certificate and the worker API's CA.

    Attributes:
        serving_secret: `kubernetes.io/tls` Secret whose `tls.crt` and `tls.key` the pods serve `/v1/calls`
            with (`OperatorSettings.warm_tls_secret`); `None`: plain HTTP.
        worker_ca_secret: Secret whose `ca.crt` the pods verify the worker API with, for input requests
            (`OperatorSettings.worker_ca_secret`); `None`: the image's CA bundle.
    """

    serving_secret: str | None = None
    worker_ca_secret: str | None = None


def _tls_parts(tls: PodTls) -> tuple[list[JsonObject], list[JsonObject]]:
    """The environment and the projected-volume sources of `tls` (only the keys named, nothing else)."""
    env: list[JsonObject] = []
    sources: list[JsonObject] = []
    if tls.serving_secret:
        env += [
            {"name": contract.ENV_SERVE_TLS_CERT_FILE, "value": f"{TLS_DIR}/tls.crt"},
            {"name": contract.ENV_SERVE_TLS_KEY_FILE, "value": f"{TLS_DIR}/tls.key"},
        ]
        items = [{"key": key, "path": key} for key in ("tls.crt", "tls.key")]
        sources.append({"secret": {"name": tls.serving_secret, "items": items}})
    if tls.worker_ca_secret:
        env.append({"name": contract.ENV_WORKER_CA_FILE, "value": f"{TLS_DIR}/ca.crt"})
        sources.append({"secret": {"name": tls.worker_ca_secret, "items": [{"key": "ca.crt", "path": "ca.crt"}]}})
    return env, sources


def build_deployment(
    mcptool: JsonObject,
    tool: ToolSpec,
    instance: str | None,
    call_key: str,
    defaults: ToolDefaults | None = None,
    tls: PodTls | None = None,
    bridge_image: str | None = None,
) -> JsonObject:
    """The Deployment of `tool`'s warm workers (`tool.warm` set), shaped as its Jobs are (`pods.shape_*`
    over the release's `defaults`); `warm.resources`, when given, replaces the container's `resources`.

    `mcptool` is the object that declares the tool: its McpTool or, for a `ServerToolSpec`, its McpServer.
    A server tool's pod is its per-call Job's (`server_jobs.server_tool_pod`, the bridge in `bridge_image`),
    the bridge serving the warm-worker API; `warm.resources` then replaces the server sidecar's.

    `call_key` is the public key (PEM) of the warm-call credentials (`contract.ENV_SERVE_CALL_KEY`): public,
    so it sits in the pod template, and a new key rolls the pods.

    With `tls`, the pods serve `/v1/calls` over HTTPS and verify the worker API with its CA: one projected
    volume (`mcptasks-tls` at `TLS_DIR`) holds the Secrets' named keys only.

    Replicas: `minWorkers`, at least 1 (a Deployment scaled to zero takes no calls; embedded pools start
    lazily instead). With `autoscaling` the replica count is left to the HPA after creation.

    Raises:
        ValueError: the tool declares no `container.image` (or, a server tool, `bridge_image` is not set).
    """
    warm = tool.warm
    assert warm is not None
    tls = tls or PodTls()
    tls_env, tls_sources = _tls_parts(tls)
    env = [
        *pods.declared_env(tool),
        {"name": contract.ENV_SERVE_HOST, "value": "0.0.0.0"},
        {"name": contract.ENV_SERVE_PORT, "value": str(warm.port)},
        {"name": contract.ENV_SERVE_CONCURRENCY, "value": str(warm.concurrency)},
        {"name": contract.ENV_SERVE_TOOL, "value": tool.name},
        {"name": contract.ENV_SERVE_CALL_KEY, "value": call_key},
        *tls_env,
    ]
    check = {"path": contract.PATH_HEALTH, "port": "calls"}
    if tls.serving_secret:  # left out for plain HTTP (its default): existing Deployments stay as they are
        check["scheme"] = "HTTPS"
    probe = {"httpGet": check, "periodSeconds": 2, "timeoutSeconds": 2}
    mounts = ({"name": TLS_VOLUME, "mountPath": TLS_DIR, "readOnly": True},) if tls_sources else ()
    container = pods.tool_container(tool, env, mounts)
    container["ports"] = [{"name": "calls", "containerPort": warm.port, "protocol": "TCP"}]
    container["readinessProbe"] = probe
    container["livenessProbe"] = {**probe, "periodSeconds": 10, "failureThreshold": 3}
    pods.shape_container(container, tool, defaults)
    if warm.resources:
        container["resources"] = warm.resources
    labels = object_labels(mcptool, tool, instance)
    execution = tool.execution
    spec: dict[str, Any] = {
        "selector": {"matchLabels": warm_selector(labels)},
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
        "template": {
            "metadata": {"labels": labels},
            "spec": {
                "automountServiceAccountToken": False,
                "enableServiceLinks": False,
                # SIGTERM drains: the calls in flight (synchronous calls and tasks) may finish
                "terminationGracePeriodSeconds": math.ceil(
                    max(execution.sync_timeout_seconds, execution.max_run_time_seconds) + execution.cancel_grace_seconds
                ),
                "securityContext": pods.pod_security_context(),
                "containers": [container],
                "volumes": [
                    pods.tmp_volume(),
                    *([{"name": TLS_VOLUME, "projected": {"sources": tls_sources}}] if tls_sources else []),
                ],
            },
        },
    }
    pods.shape_pod(spec["template"]["spec"], tool, defaults)
    if isinstance(tool, ServerToolSpec):
        pod = spec["template"]["spec"]
        server_tool_pod(pod, tool, bridge_image, defaults)
        if warm.resources:
            pod["initContainers"][-1]["resources"] = warm.resources  # the server does the work, not the bridge
    if warm.autoscaling is None:
        spec["replicas"] = max(warm.min_workers, 1)
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _metadata(mcptool, tool, instance), "spec": spec}


def build_service(mcptool: JsonObject, tool: ToolSpec, instance: str | None) -> JsonObject:
    """A ClusterIP Service in front of the warm workers (a stable name for other clients and for
    `kubectl port-forward`; the gateways call the ready pods directly, see `pod_endpoint`).
    """
    warm = tool.warm
    assert warm is not None
    labels = object_labels(mcptool, tool, instance)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(mcptool, tool, instance),
        "spec": {
            "type": "ClusterIP",
            "selector": warm_selector(labels),
            "ports": [{"name": "calls", "port": warm.port, "targetPort": "calls", "protocol": "TCP"}],
        },
    }


def build_autoscaler(mcptool: JsonObject, tool: ToolSpec, instance: str | None) -> JsonObject | None:
    """The HorizontalPodAutoscaler (`autoscaling/v2`) of the warm Deployment, or `None` without `autoscaling`."""
    warm = tool.warm
    assert warm is not None
    if warm.autoscaling is None:
        return None
    name = object_name(mcptool, tool)
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": _metadata(mcptool, tool, instance),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": max(warm.min_workers, 1),
            "maxReplicas": max(warm.max_workers, warm.min_workers, 1),
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {
                            "type": "Utilization",
                            "averageUtilization": warm.autoscaling.target_cpu_utilization_percent,
                        },
                    },
                }
            ],
        },
    }


def pod_endpoint(pod: JsonObject) -> str | None:
    """`podIP:port` of a warm pod that may take calls (Ready and not terminating), else `None`."""
    metadata = pod.get("metadata") or {}
    status = pod.get("status") or {}
    if metadata.get("deletionTimestamp") or not status.get("podIP"):
        return None
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    if not ready:
        return None
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == "calls":
                return f"{status['podIP']}:{port['containerPort']}"
    return None
