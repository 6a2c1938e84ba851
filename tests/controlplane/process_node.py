"""A process node: what a kubelet (and kube-proxy) does, with local processes instead of containers.

The test control plane has no kubelet, no container runtime and no cluster network. This program
registers a Node, binds pending pods to it (there is no scheduler either), runs each pod's first
container as a local process and reports the pod's life through the `pods/status` subresource as a
kubelet would, so the Job, ReplicaSet and Deployment controllers work on its pods:

- **Pod addresses**: each pod gets its own loopback address from 127.1.0.0/16 as `podIP` (Linux routes
  all of 127.0.0.0/8 to `lo`), so two replicas can listen on the same port. A container binds "all
  interfaces" by a value `0.0.0.0` in its env or args; the node rewrites that value to the pod's
  address, which is what `0.0.0.0` means inside a pod's own network namespace.
- **Services**: a host name `<service>.<namespace>.svc[.cluster.local]` in env or args is rewritten to
  an address from 127.2.0.0/16 where the node proxies each Service port, connection by connection, to a
  ready endpoint (kube-proxy's old userspace mode). No DNS is involved. The EndpointSlice controller
  refuses loopback addresses, so the endpoints are computed as it would: the Ready pods that match
  the Service's selector (`service_endpoints`, which the tests use too).
- **Project image**: an image named `<registry>/<org>/mcp-tasks[:tag]` is this checkout: a container
  without `command` runs the image's entrypoint `mcptasks` as `python -m mcp_tasks.cli` with this
  machine's interpreter, and paths under the image's WORKDIR `/app` mean this checkout.
- **Volumes**: a `persistentVolumeClaim` is a folder shared by every pod naming the claim, `secret`
  and `configMap` volumes are folders holding their keys, `emptyDir` a folder of the pod. A path under
  a `volumeMount`'s `mountPath` in env, args or `workingDir` is rewritten to the folder, unless it is a
  path in this checkout (which the test tools use as their `workingDir`, wherever the clone lies).
- **Service account**: unless `automountServiceAccountToken` is false, the node asks the API server
  for a token of the pod's ServiceAccount (TokenRequest) and hands it to the process as a kubeconfig
  in `$KUBECONFIG` (no file can be mounted at the in-cluster path). A `projected` volume's
  `serviceAccountToken` sources become files holding a TokenRequest token with their audience, bound
  to the pod (name and uid claims), as a kubelet writes them; its `secret` sources, the listed keys.
- **Probes**: an `httpGet` readiness probe is run against the pod's address (`scheme: HTTPS` without a
  certificate check, as a kubelet does); the pod is Ready only
  while it passes (so a rollout waits for it, and endpoints follow it). Liveness probes are not run.
- **Init containers** run in order before the pod's container, each to completion (a non-zero exit fails
  the pod); a native sidecar (an init container with `restartPolicy: Always`) runs in the background from
  when its `tcpSocket` startup probe passes (against 127.0.0.1) until the pod's container ended, then gets
  SIGTERM (it is not restarted when it exits early). The containers of a pod share its `emptyDir` folders,
  so FIFOs there join them as in a real pod. Only the first container of `containers` runs.
- **Restarts**: with `restartPolicy: Always` (Deployments) an exited container is started again after a
  back-off (1 s doubling to 30 s) and `restartCount` grows; with `Never` (our Jobs) the pod ends.

- **Image → command**: the image is not pulled. The container's `command` + `args` run as a local
  process in `workingDir` (which must exist on this machine), with the container's `env` (plain values,
  `secretKeyRef` read from the Secret, `fieldRef` to the pod's name/namespace/IP); a `python`/`python3`
  command runs this machine's interpreter (the test environment, with `mcp_tasks` installed) in place
  of the image's. An image whose registry
  host ends in `.invalid` "cannot be pulled": the pod stays Pending with `ErrImagePull` /
  `ImagePullBackOff`, as on a real node.
- **Running**: phase Running, Ready conditions, a `running` container state.
- **Exit**: phase Succeeded or Failed with the real exit code, `finishedAt`, and as termination
  message the file named by `$MCPTASKS_TERMINATION_MESSAGE_PATH` (the container's
  `terminationMessagePath`, mapped to a per-pod temporary file) or, for a failed container with
  `FallbackToLogsOnError`, the tail of its output; at most 4096 bytes, the kubelet's limit.
- **Graceful deletion**: a pod with a `deletionTimestamp` gets SIGTERM, then SIGKILL after its grace
  period, is reported Failed (exit 143 or 137), and is deleted with grace 0, which only a node may do.

    python -m tests.controlplane.process_node --kubeconfig FILE [--node NAME] [--workdir DIR]

Test infrastructure only; it trusts every pod it sees.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import ipaddress
import json
import logging
import os
import random
import re
import signal
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import aiohttp
from kubernetes_asyncio import config
from kubernetes_asyncio.client import ApiClient, Configuration, CoreV1Api
from kubernetes_asyncio.client.exceptions import ApiException

logger = logging.getLogger("process-node")

REPO = Path(__file__).resolve().parents[2]
TERMINATION_MESSAGE_LIMIT = 4096
UNPULLABLE_SUFFIX = ".invalid"
PROJECT_IMAGE = re.compile(r"^(?:[^/]+/)*mcp-tasks(?::[^/]+)?$")
IMAGE_WORKDIR = "/app"  # the Dockerfile's WORKDIR: this checkout
POD_ADDRESSES = ipaddress.ip_network("127.1.0.0/16")
SERVICE_ADDRESSES = ipaddress.ip_network("127.2.0.0/16")
SERVICE_HOST = re.compile(
    r"\b([a-z0-9](?:[-a-z0-9]*[a-z0-9])?)\.([a-z0-9](?:[-a-z0-9]*[a-z0-9])?)\.svc(?:\.cluster\.local)?\b"
)
ALL_INTERFACES = "0.0.0.0"
RESTART_BACKOFF_MAX_S = 30.0


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _conditions(ready: bool, now: str) -> list[dict[str, Any]]:
    status = "True" if ready else "False"
    return [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
        {"type": "Initialized", "status": "True", "lastTransitionTime": now},
        {"type": "ContainersReady", "status": status, "lastTransitionTime": now},
        {"type": "Ready", "status": status, "lastTransitionTime": now},
    ]


async def kubelet_wait(seconds: float) -> None:
    """Wait as a kubelet does, on its own periods: a probe's initial delay and period, the image-pull and
    crash-loop back-offs, the retry of a failed pod watch. These are the simulated node's behaviour (what the
    tests observe), not a test waiting for something, so they stay; all of them go through here.
    """
    await asyncio.sleep(seconds)


class AddressPool:
    """Loopback addresses handed out one per holder and given back when the holder goes."""

    def __init__(self, network: ipaddress.IPv4Network | ipaddress.IPv6Network) -> None:
        self._hosts: Iterator[Any] = network.hosts()
        self._free: list[str] = []

    def take(self) -> str:
        """A free address (reused ones last, so a restarted pod rarely gets its predecessor's)."""
        try:
            return str(next(self._hosts))
        except StopIteration:
            return self._free.pop(0)

    def give_back(self, address: str) -> None:
        """Return an address to the pool."""
        self._free.append(address)


class ServiceProxies:
    """kube-proxy in userspace: one loopback address per Service, each port forwarded to a ready endpoint."""

    def __init__(self, api: ApiClient) -> None:
        self.core = CoreV1Api(api)
        self.pool = AddressPool(SERVICE_ADDRESSES)
        self.addresses: dict[tuple[str, str], str] = {}
        self.servers: list[asyncio.Server] = []
        self.lock = asyncio.Lock()

    async def address(self, namespace: str, name: str) -> str | None:
        """The address standing for Service `namespace/name` (its ports are proxied), or None if absent."""
        async with self.lock:
            if (namespace, name) in self.addresses:
                return self.addresses[(namespace, name)]
            try:
                service = await self.core.read_namespaced_service(name, namespace)
            except ApiException:
                return None
            address = self.pool.take()
            for port in service.spec.ports or []:
                server = await asyncio.start_server(self._handler(namespace, name, port), address, port.port)
                self.servers.append(server)
            self.addresses[(namespace, name)] = address
            logger.info("service %s/%s proxied at %s", namespace, name, address)
            return address

    def _handler(self, namespace: str, name: str, port: Any) -> Any:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._forward(reader, writer, namespace, name, port.name, port.target_port)

        return handle

    async def _endpoint(self, namespace: str, name: str, port_name: str | None, target: Any) -> tuple[str, int] | None:
        """A ready endpoint of the Service port: the EndpointSlice controller refuses loopback addresses, so
        the endpoints are computed here as it would: Ready pods matching the selector, the target port
        resolved by number or by container port name."""
        service = await self.core.read_namespaced_service(name, namespace)
        selector = ",".join(f"{k}={v}" for k, v in (service.spec.selector or {}).items())
        if not selector:
            return None
        pods = await self.core.list_namespaced_pod(namespace, label_selector=selector)
        choices: list[tuple[str, int]] = []
        for pod in pods.items:
            ready = any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or []))
            if not ready or not pod.status.pod_ip or pod.metadata.deletion_timestamp:
                continue
            port = target if isinstance(target, int) else None
            for container in pod.spec.containers:
                for declared in container.ports or []:
                    if declared.name == target:
                        port = declared.container_port
            if port is not None:
                choices.append((pod.status.pod_ip, port))
        return random.choice(choices) if choices else None

    async def _forward(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        namespace: str,
        name: str,
        port_name: str | None,
        target: Any,
    ) -> None:
        try:
            endpoint = await self._endpoint(namespace, name, port_name, target)
            if endpoint is None:
                return  # no ready endpoint: the connection is closed, as a refused one would be
            upstream_reader, upstream_writer = await asyncio.open_connection(*endpoint)
        except (OSError, ApiException):
            writer.close()
            return

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            with contextlib.suppress(OSError):
                sink.close()

        try:
            await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))
        finally:
            writer.close()

    async def aclose(self) -> None:
        """Stop every proxy."""
        for server in self.servers:
            server.close()


@dataclass
class RunningPod:
    """A pod this node runs: its process and where its output and termination message go."""

    namespace: str
    name: str
    container: str
    image: str
    ip: str = ""
    process: asyncio.subprocess.Process | None = None
    started_at: str = field(default_factory=_now)
    output: Path | None = None
    message_file: Path | None = None
    fallback_to_logs: bool = False
    stopping: bool = False
    ready: bool = False
    restarts: int = 0
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    sidecars: list[asyncio.subprocess.Process] = field(default_factory=list)


class ProcessNode:
    """Runs the pods bound to node `node` as local processes (see the module docstring)."""

    def __init__(self, api: ApiClient, node: str, workdir: Path) -> None:
        self.api = api
        self.core = CoreV1Api(api)
        self.node = node
        self.workdir = workdir
        self.pods: dict[tuple[str, str], RunningPod] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.pod_addresses = AddressPool(POD_ADDRESSES)
        self.services = ServiceProxies(api)
        self.http: aiohttp.ClientSession | None = None

    async def register(self) -> None:
        """Create the Node object and mark it Ready."""
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": self.node, "labels": {"type": "process"}}}
        with contextlib.suppress(ApiException):
            await self.core.create_node(cast(Any, body))
        now = _now()
        capacity = {"cpu": "64", "memory": "256Gi", "pods": "1000"}
        status = {
            "status": {
                "capacity": capacity,
                "allocatable": capacity,
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "ProcessNodeReady",
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": now,
                        "message": "process node is running",
                    }
                ],
                "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                "nodeInfo": {
                    "kubeletVersion": "process-node",
                    "containerRuntimeVersion": "local-process://1",
                    "architecture": "amd64",
                    "operatingSystem": "linux",
                    "kernelVersion": "",
                    "osImage": "",
                    "bootID": "",
                    "machineID": "",
                    "systemUUID": "",
                    "kubeProxyVersion": "",
                },
            }
        }
        await self.core.patch_node_status(self.node, status)

    async def run(self) -> None:
        """Watch every pod and act on the ones that are ours or unscheduled, until cancelled."""
        await self.register()
        resource_version = ""
        while True:
            try:
                if not resource_version:
                    listing = await self.core.list_pod_for_all_namespaces()
                    resource_version = listing.metadata.resource_version
                    for pod in listing.items:
                        await self.observe(self.api.sanitize_for_serialization(pod))
                response: Any = await self.core.list_pod_for_all_namespaces(
                    watch=True,
                    resource_version=resource_version,
                    timeout_seconds=60,
                    allow_watch_bookmarks=True,
                    _preload_content=False,
                )
                async for line in response.content:
                    event = json.loads(line)
                    if event["type"] == "ERROR":
                        resource_version = ""
                        break
                    obj = event["object"]
                    resource_version = obj["metadata"]["resourceVersion"]
                    if event["type"] in ("ADDED", "MODIFIED"):
                        await self.observe(obj)
                response.release()
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("pod watch failed; listing again")
                resource_version = ""
                await kubelet_wait(0.5)

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.create_task(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def observe(self, pod: dict[str, Any]) -> None:
        """React to one pod's current state."""
        meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
        key = (meta["namespace"], meta["name"])
        node = spec.get("nodeName")
        if meta.get("deletionTimestamp"):
            if node == self.node or not node:
                running = self.pods.get(key)
                if running is None:
                    self._spawn(self._delete_now(*key))
                elif not running.stopping:
                    running.stopping = True
                    grace = int(meta.get("deletionGracePeriodSeconds") or 0)
                    self._spawn(self._stop(running, grace))
            return
        if not node and not spec.get("schedulerName", "default-scheduler").startswith("none"):
            self.pods[key] = RunningPod(
                meta["namespace"], meta["name"], spec["containers"][0]["name"], spec["containers"][0].get("image", "")
            )
            self._spawn(self._start(pod))
        elif node == self.node and key not in self.pods and status.get("phase") in (None, "Pending"):
            self.pods[key] = RunningPod(
                meta["namespace"], meta["name"], spec["containers"][0]["name"], spec["containers"][0].get("image", "")
            )
            self._spawn(self._start(pod, bound=True))

    async def _start(self, pod: dict[str, Any], bound: bool = False) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        key = (meta["namespace"], meta["name"])
        running = self.pods[key]
        container = spec["containers"][0]
        try:
            if not bound:
                binding = {
                    "apiVersion": "v1",
                    "kind": "Binding",
                    "metadata": {"name": meta["name"]},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": self.node},
                }
                response: Any = await self.core.create_namespaced_pod_binding(
                    meta["name"], meta["namespace"], cast(Any, binding), _preload_content=False
                )
                response.release()
            host = container.get("image", "").split("/", 1)[0]
            if "/" in container.get("image", "") and host.split(":")[0].endswith(UNPULLABLE_SUFFIX):
                await self._report_waiting(
                    running, "ErrImagePull", f'failed to pull image "{running.image}": not found'
                )
                await kubelet_wait(1.0)
                await self._report_waiting(running, "ImagePullBackOff", f'Back-off pulling image "{running.image}"')
                return
            running.ip = self.pod_addresses.take()
            folder = Path(tempfile.mkdtemp(prefix=f"{meta['name']}-", dir=self.workdir))
            running.output = folder / "output.log"
            running.message_file = folder / "termination-log"
            running.fallback_to_logs = container.get("terminationMessagePolicy") == "FallbackToLogsOnError"
            if not await self._init_containers(meta, spec, running, folder):
                return
            extra = {"MCPTASKS_TERMINATION_MESSAGE_PATH": str(running.message_file)}
            argv, env, cwd = await self._command(meta, spec, container, running, folder, extra)
            probe = (container.get("readinessProbe") or {}).get("httpGet")
            policy = spec.get("restartPolicy", "Always")
            delay = 1.0
            while True:
                with running.output.open("ab") as output:
                    running.process = await asyncio.create_subprocess_exec(
                        *argv,
                        cwd=cwd,
                        env=env,
                        stdin=asyncio.subprocess.DEVNULL,
                        stdout=output,
                        stderr=output,
                        start_new_session=True,
                    )
                running.started_at = _now()
                running.ready = probe is None
                await self._report_running(running)
                probing = (
                    asyncio.create_task(self._probe(running, container, container["readinessProbe"]))
                    if probe is not None
                    else None
                )
                code = await running.process.wait()
                if probing is not None:
                    probing.cancel()
                restart = policy == "Always" or (policy == "OnFailure" and code != 0)
                if running.stopping or not restart:
                    break
                running.restarts += 1
                logger.info("pod %s/%s exited with %s; restarting in %.0f s", *key, code, delay)
                await self._report_waiting(running, "CrashLoopBackOff", f"exited with {code}; back-off {delay:.0f}s")
                await kubelet_wait(delay)
                delay = min(delay * 2, RESTART_BACKOFF_MAX_S)
                if running.stopping:
                    break
            await self._stop_sidecars(running)
            await self._report_exit(running, code)
        except (OSError, ValueError) as exc:
            logger.warning("pod %s/%s cannot start: %s", *key, exc)
            await self._report_exit(running, 128, f"cannot start the container command: {exc}")
        except ApiException as exc:
            logger.warning("pod %s/%s: API error %s", *key, exc.status)
        finally:
            await self._stop_sidecars(running)
            running.finished.set()

    async def _command(
        self,
        meta: dict[str, Any],
        spec: dict[str, Any],
        container: dict[str, Any],
        running: RunningPod,
        folder: Path,
        extra: dict[str, str],
    ) -> tuple[list[str], dict[str, str], str | None]:
        """The local argv, environment and working directory of one of the pod's containers."""
        mounts = await self._volumes(meta, spec, container, folder)
        env = {**await self._environment(meta, spec, container, running, folder), **extra}
        project = bool(PROJECT_IMAGE.match(container.get("image", "")))
        if project:
            mounts = [*mounts, (IMAGE_WORKDIR, str(REPO))]
        declared_argv = [*container.get("command", []), *container.get("args", [])]
        declared = {item["name"] for item in container.get("env", [])}
        rewrite = await self._rewriter(
            meta["namespace"], running, mounts, [*declared_argv, *(env.get(name, "") for name in declared)]
        )
        # only what the pod declares is seen from inside the pod; the node's own values stay as they are
        argv = [rewrite(arg) for arg in declared_argv]
        env = {name: rewrite(value) if name in declared else value for name, value in env.items()}
        if project and not container.get("command"):
            argv = [sys.executable, "-m", "mcp_tasks.cli", *argv]  # the image's entrypoint, `mcptasks`
        if argv and argv[0] in ("python", "python3"):
            argv[0] = sys.executable  # this machine's interpreter stands in for the image's
        workdir = container.get("workingDir") or (IMAGE_WORKDIR if project else "")
        return argv, env, rewrite(workdir) if workdir else None

    async def _init_containers(
        self, meta: dict[str, Any], spec: dict[str, Any], running: RunningPod, folder: Path
    ) -> bool:
        """Run the pod's init containers in order, as a kubelet does: each to completion, but a native sidecar
        (`restartPolicy: Always`) in the background until the pod's container ends, after its `tcpSocket`
        startup probe passes (against 127.0.0.1: the pod's containers share one network). False (the pod
        reported Failed) when one fails."""
        for init in spec.get("initContainers", []):
            argv, env, cwd = await self._command(meta, spec, init, running, folder, {})
            with (folder / f"{init['name']}.log").open("ab") as output:
                process = await asyncio.create_subprocess_exec(
                    *argv, cwd=cwd, env=env, stdin=asyncio.subprocess.DEVNULL, stdout=output, stderr=output,
                    start_new_session=True,
                )  # fmt: skip
            if init.get("restartPolicy") != "Always":
                code = await process.wait()
                if code != 0:
                    await self._report_exit(running, code, f"init container {init['name']} exited with {code}")
                    return False
                continue
            running.sidecars.append(process)
            probe = (init.get("startupProbe") or {}).get("tcpSocket")
            if probe is None:
                continue
            attempts = int(init["startupProbe"].get("failureThreshold", 3))
            for _ in range(attempts):
                try:
                    _, writer = await asyncio.open_connection("127.0.0.1", int(probe["port"]))
                except OSError:
                    if process.returncode is not None:
                        break
                    await kubelet_wait(float(init["startupProbe"].get("periodSeconds", 10)))
                    continue
                writer.close()
                break
        return True

    async def _stop_sidecars(self, running: RunningPod) -> None:
        """Stop the native sidecars once the pod's container ended: SIGTERM, then SIGKILL after 5 s."""
        for process in running.sidecars:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGTERM)
        for process in running.sidecars:
            try:
                await asyncio.wait_for(process.wait(), timeout=5)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
                await process.wait()

    async def _report_running(self, running: RunningPod) -> None:
        with contextlib.suppress(ApiException):
            await self._patch_status(
                running,
                {
                    "phase": "Running",
                    "startTime": running.started_at,
                    "hostIP": "127.0.0.1",
                    "podIP": running.ip,
                    "podIPs": [{"ip": running.ip}],
                    "conditions": _conditions(running.ready, running.started_at),
                    "containerStatuses": [
                        self._container_status(
                            running, {"running": {"startedAt": running.started_at}}, ready=running.ready
                        )
                    ],
                },
            )

    async def _probe(self, running: RunningPod, container: dict[str, Any], probe: dict[str, Any]) -> None:
        """Run an httpGet readiness probe against the pod's address; report Ready when it changes."""
        get = probe["httpGet"]
        port = get["port"]
        if isinstance(port, str):
            port = next(p["containerPort"] for p in container.get("ports", []) if p.get("name") == port)
        scheme = str(get.get("scheme", "HTTP")).lower()  # HTTPS: no certificate check, as a kubelet does
        url = f"{scheme}://{running.ip}:{port}{get.get('path', '/')}"
        period = float(probe.get("periodSeconds", 10))
        failures_allowed = int(probe.get("failureThreshold", 3))
        await kubelet_wait(float(probe.get("initialDelaySeconds", 0)))
        failures = 0
        if self.http is None:
            self.http = aiohttp.ClientSession()
        while True:
            try:
                timeout = aiohttp.ClientTimeout(total=float(probe.get("timeoutSeconds", 1)))
                async with self.http.get(url, timeout=timeout, ssl=scheme != "https") as response:
                    passed = 200 <= response.status < 400
            except (aiohttp.ClientError, TimeoutError, OSError):
                passed = False
            failures = 0 if passed else failures + 1
            ready = running.ready
            if passed:
                ready = True
            elif failures >= failures_allowed:
                ready = False
            if ready != running.ready:
                running.ready = ready
                logger.info("pod %s/%s ready: %s", running.namespace, running.name, ready)
                await self._report_running(running)
            await kubelet_wait(min(period, 1.0) if not running.ready else period)

    async def _volumes(
        self, meta: dict[str, Any], spec: dict[str, Any], container: dict[str, Any], folder: Path
    ) -> list[tuple[str, str]]:
        """Materialize the volumes the container mounts; return `(mountPath, folder)` pairs."""
        namespace = meta["namespace"]
        sources = {volume["name"]: volume for volume in spec.get("volumes", [])}
        mounts: list[tuple[str, str]] = []
        for mount in container.get("volumeMounts", []):
            volume = sources.get(mount["name"], {})
            if "persistentVolumeClaim" in volume:
                path = self.workdir / "claims" / namespace / volume["persistentVolumeClaim"]["claimName"]
            else:
                path = folder / "volumes" / mount["name"]
            path.mkdir(parents=True, exist_ok=True)
            files: dict[str, bytes] = {}
            if "secret" in volume:
                secret = await self.core.read_namespaced_secret(volume["secret"]["secretName"], namespace)
                files = {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}
            elif "configMap" in volume:
                config_map = await self.core.read_namespaced_config_map(volume["configMap"]["name"], namespace)
                files = {k: v.encode() for k, v in (config_map.data or {}).items()}
            elif "projected" in volume:
                files = await self._projected_tokens(meta, spec, volume["projected"])
            for name, content in files.items():
                (path / name).write_bytes(content)
            mounts.append((mount["mountPath"].rstrip("/") or "/", str(path)))
        return mounts

    async def _projected_tokens(
        self, meta: dict[str, Any], spec: dict[str, Any], projected: dict[str, Any]
    ) -> dict[str, bytes]:
        """The `serviceAccountToken` and `secret` sources of a projected volume, as a kubelet makes them: a
        TokenRequest for the pod's ServiceAccount with the source's audience, bound to this pod (name and uid
        claims); a Secret's listed keys."""
        account = spec.get("serviceAccountName") or "default"
        files: dict[str, bytes] = {}
        for source in projected.get("sources", []):
            if "secret" in source:  # the listed keys of a Secret (all of them without `items`), as a kubelet does
                secret = await self.core.read_namespaced_secret(source["secret"]["name"], meta["namespace"])
                data = {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}
                items = source["secret"].get("items") or [{"key": key, "path": key} for key in data]
                files.update({item["path"]: data[item["key"]] for item in items})
                continue
            wanted = source.get("serviceAccountToken")
            if not wanted:
                continue
            request = {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {
                    "audiences": [wanted["audience"]] if wanted.get("audience") else [],
                    "expirationSeconds": int(wanted.get("expirationSeconds", 3600)),
                    "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]},
                },
            }
            answer = await self.core.create_namespaced_service_account_token(
                account, meta["namespace"], cast(Any, request)
            )
            files[wanted["path"]] = answer.status.token.encode()
        return files

    async def _rewriter(
        self, namespace: str, running: RunningPod, mounts: list[tuple[str, str]], values: list[str]
    ) -> Any:
        """A function mapping a value of env/args/workingDir from the pod's view to this machine's."""
        services: dict[str, str] = {}
        for value in values:
            for match in SERVICE_HOST.finditer(value):
                address = await self.services.address(match.group(2), match.group(1))
                if address is not None:
                    services[match.group(0)] = address
        ordered = sorted(mounts, key=lambda pair: len(pair[0]), reverse=True)

        checkout = str(REPO)

        def rewrite(value: str) -> str:
            if value == ALL_INTERFACES:
                return running.ip
            if value == checkout or value.startswith(checkout + "/"):
                # A path in this checkout (a test tool's workingDir) is this machine's already, even
                # when the checkout lies under a path the pod mounts (a clone under /tmp, a pod's /tmp).
                return SERVICE_HOST.sub(lambda m: services.get(m.group(0), m.group(0)), value)
            for mount_path, folder in ordered:
                if value == mount_path or value.startswith(mount_path + "/"):
                    value = folder + value[len(mount_path) :]
                    break
            return SERVICE_HOST.sub(lambda m: services.get(m.group(0), m.group(0)), value)

        return rewrite

    async def _service_account_kubeconfig(
        self, meta: dict[str, Any], spec: dict[str, Any], folder: Path
    ) -> Path | None:
        """A kubeconfig with a token of the pod's ServiceAccount, or None (not mounted, or no such account)."""
        if spec.get("automountServiceAccountToken") is False:
            return None
        account = spec.get("serviceAccountName") or "default"
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 86400},
        }
        try:
            answer = await self.core.create_namespaced_service_account_token(
                account, meta["namespace"], cast(Any, request)
            )
        except ApiException as exc:
            logger.info("pod %s/%s: no token for account %s (%s)", meta["namespace"], meta["name"], account, exc.status)
            return None
        configuration = self.api.configuration
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "cluster",
                    "cluster": {"server": configuration.host, "certificate-authority": configuration.ssl_ca_cert},
                }
            ],
            "users": [{"name": account, "user": {"token": answer.status.token}}],
            "contexts": [
                {"name": "pod", "context": {"cluster": "cluster", "user": account, "namespace": meta["namespace"]}}
            ],
            "current-context": "pod",
        }
        path = folder / "kubeconfig"
        path.write_text(json.dumps(kubeconfig))
        return path

    async def _environment(
        self, meta: dict[str, Any], spec: dict[str, Any], container: dict[str, Any], running: RunningPod, folder: Path
    ) -> dict[str, str]:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", "/tmp"),
            "HOSTNAME": meta["name"],
        }
        kubeconfig = await self._service_account_kubeconfig(meta, spec, folder)
        if kubeconfig is not None:
            env["KUBECONFIG"] = str(kubeconfig)
        fields = {"metadata.name": meta["name"], "metadata.namespace": meta["namespace"], "status.podIP": running.ip}
        for item in container.get("env", []):
            if "value" in item or not item.get("valueFrom"):
                env[item["name"]] = item.get("value", "")
                continue
            source = item.get("valueFrom") or {}
            if "secretKeyRef" in source:
                ref = source["secretKeyRef"]
                secret = await self.core.read_namespaced_secret(ref["name"], meta["namespace"])
                env[item["name"]] = base64.b64decode(secret.data[ref["key"]]).decode()
            elif "fieldRef" in source:
                env[item["name"]] = fields.get(source["fieldRef"]["fieldPath"], "")
        return env

    def _container_status(self, running: RunningPod, state: dict[str, Any], ready: bool) -> dict[str, Any]:
        return {
            "name": running.container,
            "image": running.image,
            "imageID": "",
            "ready": ready,
            "started": "running" in state,
            "restartCount": running.restarts,
            "state": state,
        }

    async def _patch_status(self, running: RunningPod, status: dict[str, Any]) -> None:
        await self.core.patch_namespaced_pod_status(running.name, running.namespace, {"status": status})

    async def _report_waiting(self, running: RunningPod, reason: str, message: str) -> None:
        await self._patch_status(
            running,
            {
                "phase": "Running" if running.restarts else "Pending",
                "hostIP": "127.0.0.1",
                "conditions": _conditions(False, _now()),
                "containerStatuses": [
                    self._container_status(running, {"waiting": {"reason": reason, "message": message}}, ready=False)
                ],
            },
        )

    def _termination_message(self, running: RunningPod, code: int) -> str:
        message = ""
        if running.message_file is not None and running.message_file.exists():
            message = running.message_file.read_bytes()[:TERMINATION_MESSAGE_LIMIT].decode(errors="replace")
        if not message and code != 0 and running.fallback_to_logs and running.output is not None:
            message = running.output.read_bytes()[-TERMINATION_MESSAGE_LIMIT:].decode(errors="replace")
        return message

    async def _report_exit(self, running: RunningPod, code: int, message: str | None = None) -> None:
        finished = _now()
        if code < 0:  # killed by a signal: report as a shell would (128 + signal)
            code = 128 - code
        terminated = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "message": message if message is not None else self._termination_message(running, code),
            "startedAt": running.started_at,
            "finishedAt": finished,
        }
        with contextlib.suppress(ApiException):
            await self._patch_status(
                running,
                {
                    "phase": "Succeeded" if code == 0 else "Failed",
                    "conditions": _conditions(False, finished),
                    "containerStatuses": [self._container_status(running, {"terminated": terminated}, ready=False)],
                },
            )
        logger.info("pod %s/%s exited with %s", running.namespace, running.name, code)

    async def _stop(self, running: RunningPod, grace_s: int) -> None:
        process = running.process
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(running.finished.wait(), timeout=max(grace_s, 0))
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(running.finished.wait(), timeout=5)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if process is not None:
                os.killpg(process.pid, signal.SIGKILL)  # what the container runtime does to the rest of the group
        await self._stop_sidecars(running)
        await self._delete_now(running.namespace, running.name)

    async def _delete_now(self, namespace: str, name: str) -> None:
        with contextlib.suppress(ApiException):
            await self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        running = self.pods.pop((namespace, name), None)
        if running is not None and running.ip:
            self.pod_addresses.give_back(running.ip)

    async def aclose(self) -> None:
        """Kill every process (as a node shutting down would)."""
        for running in self.pods.values():
            for process in [running.process, *running.sidecars]:
                if process is not None and process.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(process.pid, signal.SIGKILL)
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.services.aclose()
        if self.http is not None:
            await self.http.close()


async def _main(args: argparse.Namespace) -> None:
    configuration = Configuration()
    await config.load_kube_config(config_file=str(args.kubeconfig), client_configuration=configuration)
    args.workdir.mkdir(parents=True, exist_ok=True)
    async with ApiClient(configuration) as api:
        node = ProcessNode(api, args.node, args.workdir)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        watching = asyncio.create_task(node.run())
        await stop.wait()
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)
        await node.aclose()


def main() -> None:
    """Entry point: `python -m tests.controlplane.process_node --kubeconfig FILE`."""
    parser = argparse.ArgumentParser(prog="python -m tests.controlplane.process_node")
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--node", default="process-node")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "process-node")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(_main(args))


if __name__ == "__main__":
    main()
