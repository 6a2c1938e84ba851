"""`WarmTools`: the operator keeps every warm tool's workers as declared and publishes where they take calls.

A warm tool is an McpTool with `spec.warm`, or a tool an McpServer with `spec.warm` lists (one pool per
server tool, `warm.py`). Level-based, like the rest of the operator: after a change of the catalog (McpTools
and McpServers), a warm pod's event, or the resync interval, it
1. applies (server-side apply, field manager `mcp-tasks-operator`) the Deployment, Service and, with
   `autoscaling`, HPA of each warm tool whose desired objects changed since its last apply;
2. deletes the warm objects of tools that are gone or no longer warm (owner references also let
   the garbage collector remove them with a deleted McpTool or McpServer);
3. writes where each warm tool takes calls (`endpoints` of the ready pods, `readyWorkers`, `service`) whose
   endpoints changed, into its McpTool's `status.warm` or its McpServer's `status.warm.<tool name>`: one
   status merge patch per change, never per call.

Only the leader runs it (`leadership.LeaderElection`): two replicas must not publish endpoints or apply
objects against each other.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
from typing import Any, Final

from kubernetes_asyncio.client import ApiClient

from mcp_tasks import aio
from mcp_tasks.operator.labels import WARM_SELECTOR, warm_pool
from mcp_tasks.operator.tool_status import MERGE_PATCH
from mcp_tasks.operator.warm import (
    FIELD_MANAGER,
    PodTls,
    build_autoscaler,
    build_deployment,
    build_service,
    object_labels,
    object_name,
    pod_endpoint,
)
from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.store.kubernetes import client
from mcp_tasks.store.kubernetes.catalog import KubernetesToolCatalog
from mcp_tasks.store.kubernetes.resources import GROUP, SERVER_PLURAL, TOOL_PLURAL, VERSION
from mcp_tasks.tasks.errors import StoreUnavailable
from mcp_tasks.tasks.pod_shape import ToolDefaults
from mcp_tasks.tasks.servers import ServerToolSpec
from mcp_tasks.tasks.tools import ToolSpec
from mcp_tasks.worker.tls import endpoint_of

logger = logging.getLogger("mcp_tasks.operator")

APPLY: Final[dict[str, Any]] = {
    "_content_type": "application/apply-patch+yaml",
    "field_manager": FIELD_MANAGER,
    "force": True,
}
"""Request options of a server-side apply that owns every field it sends."""
RETRY_S: Final = 5.0
"""Wait before trying a failed apply, prune or status write again, in seconds."""


class WarmTools:
    """Runs warm tools' Deployments, Services and HPAs in `namespace`, and their owners' `status.warm`.

    Args:
        api: an open kubernetes_asyncio `ApiClient`.
        namespace: the operator's namespace.
        catalog: the McpTools (shared with the reconciler).
        instance: the `app.kubernetes.io/instance` label for the pods (the release's NetworkPolicy).
        call_key: the public key (PEM) the warm pods check their calls' credentials with.
        resync_s: how often everything is applied and listed again even without a change, in seconds.
        defaults: the release's `toolDefaults`, merged under each warm tool's pod shape.
        tls: the warm pods' serving certificate and the worker API's CA (`warm.PodTls`); `None`: plain HTTP.
        bridge_image: the project's image, whose bridge serves a warm McpServer's tool beside the server
            (`OperatorSettings.bridge_image`); `None`: warm McpServers get no workers (logged).
    """

    def __init__(
        self,
        api: ApiClient,
        namespace: str,
        catalog: KubernetesToolCatalog,
        instance: str | None,
        call_key: str,
        resync_s: float = 300.0,
        defaults: ToolDefaults | None = None,
        tls: PodTls | None = None,
        bridge_image: str | None = None,
    ) -> None:
        self.namespace = namespace
        self.bridge_image = bridge_image
        self.tls = tls
        self.defaults = defaults
        self.catalog = catalog
        self.instance = instance
        self.call_key = call_key
        self.resync_s = resync_s
        apis = client.Apis(api)
        self._apps, self._core, self._autoscaling, self._objects = apis.apps, apis.core, apis.autoscaling, apis.objects
        self._serialize = api.sanitize_for_serialization
        self._applied: dict[str, str] = {}  # `labels.warm_pool` → digest of what was applied last
        self._pods: dict[str, dict[str, str | None]] = {}  # `labels.warm_pool` → pod name → endpoint (None: not ready)
        self._wake = asyncio.Event()

    async def kill_pod(self, base_url: str) -> None:
        """Delete, at once, the warm pod serving at `base_url` (`http://ip:port`); its Deployment replaces it."""
        address = endpoint_of(base_url).rsplit(":", 1)[0]
        listed = await client.call(self._core.list_namespaced_pod, self.namespace, label_selector=WARM_SELECTOR)
        for pod in listed.items:
            if pod.status is not None and pod.status.pod_ip == address:
                with contextlib.suppress(client.ApiError):
                    await client.call(
                        self._core.delete_namespaced_pod, pod.metadata.name, self.namespace, grace_period_seconds=0
                    )
                    logger.warning("deleted warm pod %s: a call on it did not stop", pod.metadata.name)

    def pod_event(self, kind: str, pod: JsonObject) -> None:
        """A warm pod changed (a kopf watch event): note whether it takes calls, and wake the loop."""
        metadata = pod.get("metadata") or {}
        owner = warm_pool(metadata.get("labels") or {})
        if not owner:
            return
        pods = self._pods.setdefault(owner, {})
        name = str(metadata.get("name"))
        endpoint = None if kind == "DELETED" else pod_endpoint(pod)
        if kind == "DELETED":
            pods.pop(name, None)
        else:
            pods[name] = endpoint
        self._wake.set()

    async def run(self, active: asyncio.Event) -> None:
        """Run until cancelled, while `active` is set (this replica holds the leader Lease; a standby must
        neither publish endpoints nor fight the leader). On becoming the leader it lists the pods afresh.
        """
        changed = self.catalog.subscribe()
        loop = asyncio.get_running_loop()
        next_resync = loop.time()
        while True:
            if not active.is_set():
                await active.wait()
                next_resync = loop.time()  # newly active: list the pods again before publishing anything
            catalog_changed = changed.is_set()
            changed.clear()
            self._wake.clear()
            resync = loop.time() >= next_resync
            if resync:
                next_resync = loop.time() + self.resync_s
                self._applied.clear()
            healthy = True
            steps = [self._apply, self._publish]
            if catalog_changed or resync:
                steps.insert(1, self._prune)
            if resync:
                steps.insert(0, self._relist_pods)
            for step in steps:  # one failing step (or McpTool) does not hold up the others
                try:
                    healthy = await step() and healthy
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # the API server is away: retried below
                    logger.warning("warm tools: %s failed: %s; retrying in %.0fs", step.__name__, exc, RETRY_S)
                    healthy = False
            timeout = min(RETRY_S if not healthy else self.resync_s, max(next_resync - loop.time(), 0.0))
            await aio.first_of(changed.wait(), self._wake.wait(), asyncio.sleep(timeout))

    def _warm_tools(self) -> dict[str, tuple[JsonObject, ToolSpec]]:
        """`labels.warm_pool` → (the declaring McpTool or McpServer, the tool) of every warm tool served."""
        pools: dict[str, tuple[JsonObject, ToolSpec]] = {}
        for obj, tool in self.catalog.served().values():
            if tool.warm is not None:
                pools[str(warm_pool(object_labels(obj, tool, None)))] = (obj, tool)
        servers = self.catalog.servers()
        for name, verdict in self.catalog.server_verdicts().items():
            for tool_name in verdict.served:
                listed = self.catalog.get_tool(tool_name)
                if name in servers and isinstance(listed, ServerToolSpec) and listed.warm is not None:
                    pools[str(warm_pool(object_labels(servers[name], listed, None)))] = (servers[name], listed)
        return pools

    async def _relist_pods(self) -> bool:
        listed = await client.call(self._core.list_namespaced_pod, self.namespace, label_selector=WARM_SELECTOR)
        pods: dict[str, dict[str, str | None]] = {}
        for item in listed.items:
            pod = self._serialize(item)
            owner = warm_pool((pod.get("metadata") or {}).get("labels") or {})
            if owner:
                pods.setdefault(owner, {})[str(pod["metadata"]["name"])] = pod_endpoint(pod)
        self._pods = pods
        return True

    async def _apply(self) -> bool:
        """Apply each warm tool's objects that changed; False when one could not be applied."""
        failed = False
        for pool, (obj, tool) in self._warm_tools().items():
            try:
                manifests = [
                    build_deployment(
                        obj, tool, self.instance, self.call_key, self.defaults, self.tls, self.bridge_image
                    ),
                    build_service(obj, tool, self.instance),
                ]
            except ValueError as exc:
                logger.warning("%s: cannot run warm workers: %s", pool, exc)
                continue
            autoscaler = build_autoscaler(obj, tool, self.instance)
            if autoscaler is not None:
                manifests.append(autoscaler)
            digest = hashlib.sha256(json.dumps(manifests, sort_keys=True).encode()).hexdigest()
            if self._applied.get(pool) == digest:
                continue
            target = (object_name(obj, tool), self.namespace)
            try:
                await client.call(self._apps.patch_namespaced_deployment, *target, manifests[0], **APPLY)
                await client.call(self._core.patch_namespaced_service, *target, manifests[1], **APPLY)
                if autoscaler is not None:
                    patch_autoscaler = self._autoscaling.patch_namespaced_horizontal_pod_autoscaler
                    await client.call(patch_autoscaler, *target, autoscaler, **APPLY)
            except client.ApiError as exc:
                logger.warning("%s: could not apply its warm workers: %s", pool, exc)
                self._applied[pool] = digest  # refused as it is: again when its owner changes, or at resync
                continue
            except StoreUnavailable as exc:
                logger.warning("%s: could not apply its warm workers: %s", pool, exc)
                failed = True  # the API server is away: again in RETRY_S
                continue
            self._applied[pool] = digest
            logger.info("%s: warm workers applied (Deployment and Service %s)", pool, target[0])
        return not failed

    async def _prune(self) -> bool:
        """Delete warm objects whose tool is gone or no longer warm (or no longer autoscaled, for HPAs)."""
        pools = self._warm_tools()
        scaled = {pool for pool, (_obj, tool) in pools.items() if tool.warm is not None and tool.warm.autoscaling}
        kinds: list[tuple[client.ApiMethod, client.ApiMethod, set[str]]] = [
            (self._apps.list_namespaced_deployment, self._apps.delete_namespaced_deployment, set(pools)),
            (self._core.list_namespaced_service, self._core.delete_namespaced_service, set(pools)),
            (
                self._autoscaling.list_namespaced_horizontal_pod_autoscaler,
                self._autoscaling.delete_namespaced_horizontal_pod_autoscaler,
                scaled,
            ),
        ]
        for list_them, delete, keep in kinds:
            listed = await client.call(list_them, self.namespace, label_selector=WARM_SELECTOR)
            for item in listed.items:
                owner = warm_pool(item.metadata.labels or {})
                if owner in keep:
                    continue
                with contextlib.suppress(client.ApiError):
                    await client.call(delete, item.metadata.name, self.namespace, propagation_policy="Background")
                    logger.info("deleted %s (its tool %s is not warm now)", item.metadata.name, owner)
                self._applied.pop(str(owner), None)
        await self._forget_stale_server_entries(pools)
        return True

    async def _forget_stale_server_entries(self, pools: dict[str, tuple[JsonObject, ToolSpec]]) -> None:
        """Remove from each McpServer's `status.warm` the entries of tools that are not warm now (the server
        stopped being warm, or stopped listing the tool), so that the tool, warm again later, does not offer
        its old workers' addresses until its new ones are published. One merge patch per server that has any.
        """
        warm_now: dict[str, set[str]] = {}
        for obj, tool in pools.values():
            if isinstance(tool, ServerToolSpec):
                warm_now.setdefault(str(obj["metadata"]["name"]), set()).add(tool.name)
        for name, obj in self.catalog.servers().items():
            entries = (obj.get("status") or {}).get("warm") or {}
            stale = sorted(set(entries) - warm_now.get(name, set()))
            if not stale:
                continue
            # a merge patch's null removes the key
            if not await self._patch_status(SERVER_PLURAL, name, {"warm": dict.fromkeys(stale)}):
                continue
            logger.info("mcpserver/%s: forgot the warm workers of %s (not warm now)", name, ", ".join(stale))

    async def _patch_status(self, plural: str, name: str, status: JsonObject) -> bool:
        """Merge-patch `status` into the status of the McpTool or McpServer (`plural`) `name`; False when it is
        gone.
        """
        try:
            await client.call(
                self._objects.patch_namespaced_custom_object_status,
                GROUP,
                VERSION,
                self.namespace,
                plural,
                name,
                {"status": status},
                **MERGE_PATCH,
            )
        except client.NotFound:
            return False
        return True

    async def _publish(self) -> bool:
        """Write where each warm tool whose ready endpoints changed takes calls: its McpTool's `status.warm`, or
        its McpServer's `status.warm.<tool name>`.
        """
        for pool, (obj, tool) in self._warm_tools().items():
            assert tool.warm is not None
            endpoints = sorted(e for e in self._pods.get(pool, {}).values() if e)
            service = f"{object_name(obj, tool)}.{self.namespace}.svc:{tool.warm.port}"
            wanted = {"endpoints": endpoints, "readyWorkers": len(endpoints), "service": service}
            status = obj.setdefault("status", {})
            warm = status.get("warm") or {}
            if isinstance(tool, ServerToolSpec):  # one entry per tool, beside what discovery writes
                plural, current, written = SERVER_PLURAL, warm.get(tool.name) or {}, {**warm, tool.name: wanted}
            else:
                plural, current, written = TOOL_PLURAL, warm, wanted
            if {key: current.get(key) for key in wanted} == wanted:
                continue
            patch = {"warm": {tool.name: wanted} if plural == SERVER_PLURAL else wanted}
            if not await self._patch_status(plural, str(obj["metadata"]["name"]), patch):
                continue
            status["warm"] = written  # until the watch brings our own write back
            logger.info("%s: %d warm worker(s) ready", pool, len(endpoints))
        return True
