"""A process node: what a kubelet does for the pods of our Jobs, with local processes instead of containers.

The test control plane has no kubelet and no container runtime. This program registers a Node, binds
pending pods to it (there is no scheduler either), runs each pod's first container as a local process
and reports the pod's life through the `pods/status` subresource as a kubelet would, so the Job
controller can conclude Jobs:

- **Image → command**: the image is not pulled. The container's `command` + `args` run as a local
  process in `workingDir` (which must exist on this machine), with the container's `env` (plain values,
  `secretKeyRef` read from the Secret, `fieldRef` to the pod's name/namespace); a `python`/`python3`
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
import json
import logging
import os
import signal
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from kubernetes_asyncio import config
from kubernetes_asyncio.client import ApiClient, Configuration, CoreV1Api
from kubernetes_asyncio.client.exceptions import ApiException

logger = logging.getLogger("process-node")

TERMINATION_MESSAGE_LIMIT = 4096
UNPULLABLE_SUFFIX = ".invalid"


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


@dataclass
class RunningPod:
    """A pod this node runs: its process and where its output and termination message go."""

    namespace: str
    name: str
    container: str
    image: str
    process: asyncio.subprocess.Process | None = None
    started_at: str = field(default_factory=_now)
    output: Path | None = None
    message_file: Path | None = None
    fallback_to_logs: bool = False
    stopping: bool = False
    finished: asyncio.Event = field(default_factory=asyncio.Event)


class ProcessNode:
    """Runs the pods bound to node `node` as local processes (see the module docstring)."""

    def __init__(self, api: ApiClient, node: str, workdir: Path) -> None:
        self.api = api
        self.core = CoreV1Api(api)
        self.node = node
        self.workdir = workdir
        self.pods: dict[tuple[str, str], RunningPod] = {}
        self.tasks: set[asyncio.Task[None]] = set()

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
                await asyncio.sleep(0.5)

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
                await asyncio.sleep(1.0)
                await self._report_waiting(running, "ImagePullBackOff", f'Back-off pulling image "{running.image}"')
                return
            env = await self._environment(meta, container)
            folder = Path(tempfile.mkdtemp(prefix=f"{meta['name']}-", dir=self.workdir))
            running.output = folder / "output.log"
            running.message_file = folder / "termination-log"
            running.fallback_to_logs = container.get("terminationMessagePolicy") == "FallbackToLogsOnError"
            env["MCPTASKS_TERMINATION_MESSAGE_PATH"] = str(running.message_file)
            argv = [*container.get("command", []), *container.get("args", [])]
            if argv and argv[0] in ("python", "python3"):
                argv[0] = sys.executable  # this machine's interpreter stands in for the image's
            with running.output.open("wb") as output:
                running.process = await asyncio.create_subprocess_exec(
                    *argv,
                    cwd=container.get("workingDir") or None,
                    env=env,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=output,
                    stderr=output,
                    start_new_session=True,
                )
            running.started_at = _now()
            await self._patch_status(
                running,
                {
                    "phase": "Running",
                    "startTime": running.started_at,
                    "hostIP": "127.0.0.1",
                    "podIP": "127.0.0.1",
                    "conditions": _conditions(True, running.started_at),
                    "containerStatuses": [
                        self._container_status(running, {"running": {"startedAt": running.started_at}}, ready=True)
                    ],
                },
            )
            code = await running.process.wait()
            await self._report_exit(running, code)
        except (OSError, ValueError) as exc:
            logger.warning("pod %s/%s cannot start: %s", *key, exc)
            await self._report_exit(running, 128, f"cannot start the container command: {exc}")
        except ApiException as exc:
            logger.warning("pod %s/%s: API error %s", *key, exc.status)
        finally:
            running.finished.set()

    async def _environment(self, meta: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", "/tmp"),
            "HOSTNAME": meta["name"],
        }
        for item in container.get("env", []):
            if "value" in item:
                env[item["name"]] = item["value"]
                continue
            source = item.get("valueFrom") or {}
            if "secretKeyRef" in source:
                ref = source["secretKeyRef"]
                secret = await self.core.read_namespaced_secret(ref["name"], meta["namespace"])
                env[item["name"]] = base64.b64decode(secret.data[ref["key"]]).decode()
            elif "fieldRef" in source:
                path = source["fieldRef"]["fieldPath"]
                env[item["name"]] = {"metadata.name": meta["name"], "metadata.namespace": meta["namespace"]}.get(
                    path, ""
                )
        return env

    def _container_status(self, running: RunningPod, state: dict[str, Any], ready: bool) -> dict[str, Any]:
        return {
            "name": running.container,
            "image": running.image,
            "imageID": "",
            "ready": ready,
            "started": "running" in state,
            "restartCount": 0,
            "state": state,
        }

    async def _patch_status(self, running: RunningPod, status: dict[str, Any]) -> None:
        await self.core.patch_namespaced_pod_status(running.name, running.namespace, {"status": status})

    async def _report_waiting(self, running: RunningPod, reason: str, message: str) -> None:
        await self._patch_status(
            running,
            {
                "phase": "Pending",
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
        await self._delete_now(running.namespace, running.name)

    async def _delete_now(self, namespace: str, name: str) -> None:
        with contextlib.suppress(ApiException):
            await self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        self.pods.pop((namespace, name), None)

    async def aclose(self) -> None:
        """Kill every process (as a node shutting down would)."""
        for running in self.pods.values():
            if running.process is not None and running.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(running.process.pid, signal.SIGKILL)
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


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
