"""The Job of one call to an McpServer's tool: the unmodified server image beside the bridge. Pure functions.

The Job is the McpTool Job of `jobs.build_job` (its name, labels, owner reference, first-attempt annotation,
retries for idempotent tools, projected worker token, pod shape and restricted security context), with a
different pod:

- **`server`**: a native sidecar (an init container with `restartPolicy: Always`, Kubernetes 1.29+) running
  `spec.container.image` as it is: nothing is installed in it. It gets the server's own environment (its
  `value`s and `valueFrom` sources, `envFrom`), resources, volumes and `workingDir`, and never the worker
  token: that volume is mounted in the bridge alone.
- **`tool`**: the bridge (`python -m mcp_tasks.bridge`, the operator's `bridge_image`), the Job's one
  container, so the Job completes when the bridge exits and the kubelet then stops the sidecar. It has the
  worker API's environment (`runtime.contract`), the bridge's (`tasks.servers`: the server as
  `MCPTASKS_BRIDGE_SERVER`, the tool, idempotency), and none of the server's Secrets.

How the bridge reaches the server inside the pod, with no `pods/exec` or `pods/attach` for the operator:

- `streamable-http`: at `http://127.0.0.1:<http.port><http.path>` (containers of a pod share one network
  namespace). The sidecar's TCP startup probe on that port holds the bridge back until the server listens.
- `stdio`: through two FIFOs on a shared memory-backed `emptyDir` (`FIFO_DIR`): the `fifos` init container
  (the bridge image) makes them; the server's command runs as `sh -c 'exec "$@" <in >out'` (`SERVER_REDIRECT`),
  so `sh` only redirects and then is the server; the bridge's stdio child is `sh -c 'cat out & exec cat >in'`
  in that folder, which joins its pipes to the FIFOs (the bridge speaks stdio to it exactly as to a local
  server). Limitation: the server image needs `/bin/sh` (Debian, Alpine and the official node and python
  images have it; a distroless image does not: give it a `streamable-http` transport, docs/mcp-servers.md).
"""

from __future__ import annotations

import json
from typing import Any, Final

from mcp_tasks.operator import jobs
from mcp_tasks.operator.settings import OperatorSettings
from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.tasks import pod_shape
from mcp_tasks.tasks.servers import (
    BRIDGE_MODULE,
    ENV_BRIDGE_IDEMPOTENT,
    ENV_BRIDGE_SERVER,
    ENV_BRIDGE_TASK_SUPPORT,
    ENV_BRIDGE_TOOL,
    ServerSpec,
    ServerToolSpec,
    Transport,
)

SERVER_CONTAINER: Final = "server"
"""The native sidecar running the server's image."""
FIFO_CONTAINER: Final = "fifos"
"""The init container that makes the stdio FIFOs."""
FIFO_VOLUME: Final = f"{pod_shape.RESERVED_VOLUME_PREFIX}stdio"
FIFO_DIR: Final = "/run/mcp-server"
"""Where the stdio FIFOs live in both containers: `in` (the server's stdin) and `out` (its stdout)."""
SERVER_TMP_VOLUME: Final = f"{pod_shape.RESERVED_VOLUME_PREFIX}server-tmp"
BRIDGE_COMMAND: Final = ("python", "-m", BRIDGE_MODULE)
SERVER_REDIRECT: Final = 'i=$1 o=$2; shift 2; exec "$@" <"$i" >"$o"'
"""`sh -c` script that joins the server's stdin and stdout to the FIFOs (`$1`, `$2`) and becomes the server
(the rest of its arguments): `sh` only opens the two files."""
BRIDGE_RELAY: Final = "cat out & exec cat >in"
"""`sh -c` script of the bridge's stdio child, run in `FIFO_DIR` (the bridge container's working directory):
its stdin to the server's, the server's stdout to its stdout."""
BRIDGE_RESOURCES: Final = {"requests": {"cpu": "50m", "memory": "96Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}}
"""The bridge container's resources (a Python process holding one MCP session): every kind a cpu and memory
ResourceQuota names, so such a namespace admits the pod (the server's come from its spec and `toolDefaults`)."""
STARTUP_PROBE_PERIOD_S: Final = 1


def bridge_target(server: ServerSpec) -> JsonObject:
    """The bridge's view of the server in the pod (`MCPTASKS_BRIDGE_SERVER`, `tasks.servers.bridge_target`'s
    shape): a stdio child that relays to the sidecar's FIFOs, or the sidecar's local Streamable HTTP URL.
    No `env`: the server's environment is the sidecar's, not the bridge's.
    """
    spec = server.manifest
    target: JsonObject = {
        "server": server.name,
        "transport": spec.transport.value,
        "command": None,
        "env": {},
        "workingDir": None,
        "http": None,
    }
    if spec.transport is Transport.STDIO:
        target["command"] = ["sh", "-c", BRIDGE_RELAY]
    else:
        assert spec.http is not None  # the manifest requires it for this transport
        url = f"http://127.0.0.1:{spec.http.port}{spec.http.path}"
        target["http"] = {"port": spec.http.port, "path": spec.http.path, "portEnv": None, "url": url}
    return target


def _restricted() -> JsonObject:
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def server_container(server: ServerSpec, defaults: pod_shape.ToolDefaults | None) -> dict[str, Any]:
    """The native sidecar that runs the server's image with its own environment, shape and (stdio) FIFOs.

    Raises:
        ValueError: the server declares no `container.image`.
    """
    spec = server.manifest
    declared = spec.container
    if declared is None or not declared.image:
        raise ValueError(f"McpServer {server.name!r} declares no container.image; it cannot run on Kubernetes")
    command = list(declared.command)
    mounts: list[JsonObject] = [{"name": SERVER_TMP_VOLUME, "mountPath": "/tmp"}]
    if spec.transport is Transport.STDIO:
        command = ["sh", "-c", SERVER_REDIRECT, command[0], f"{FIFO_DIR}/in", f"{FIFO_DIR}/out", *command]
        mounts.append({"name": FIFO_VOLUME, "mountPath": FIFO_DIR})
    container: dict[str, Any] = {
        "name": SERVER_CONTAINER,
        "image": declared.image,
        "command": command,
        "restartPolicy": "Always",
        "env": [var.model_dump(by_alias=True, exclude_none=True) for var in declared.env],
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": _restricted(),
        "volumeMounts": [*mounts, *(m.model_dump(by_alias=True, exclude_none=True) for m in declared.volume_mounts)],
    }
    if declared.working_dir:
        container["workingDir"] = declared.working_dir
    if declared.env_from:
        container["envFrom"] = [item.model_dump(by_alias=True, exclude_none=True) for item in declared.env_from]
    shape = pod_shape.merged(declared, defaults)
    if shape["resources"] is not None:
        resources = shape["resources"].model_dump(by_alias=True, exclude_none=True, mode="json")
        container["resources"] = {kind: values for kind, values in resources.items() if values}
    if spec.transport is Transport.STREAMABLE_HTTP:
        assert spec.http is not None
        container["startupProbe"] = {
            "tcpSocket": {"port": spec.http.port},
            "periodSeconds": STARTUP_PROBE_PERIOD_S,
            "failureThreshold": max(1, int(spec.discovery_timeout_seconds)),
        }
    return container


def fifo_container(image: str) -> dict[str, Any]:
    """The init container (the bridge image) that makes the two stdio FIFOs before the server starts."""
    return {
        "name": FIFO_CONTAINER,
        "image": image,
        "command": ["mkfifo", "-m", "0600", f"{FIFO_DIR}/in", f"{FIFO_DIR}/out"],
        "securityContext": _restricted(),
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"cpu": "100m", "memory": "32Mi"}},
        "volumeMounts": [{"name": FIFO_VOLUME, "mountPath": FIFO_DIR}],
    }


def build_server_job(
    task: JsonObject, tool: ServerToolSpec, settings: OperatorSettings, traceparent: str | None = None
) -> JsonObject:
    """The Job that runs one call of `tool` for `task`: the server as a sidecar, the bridge as the container.

    Raises:
        ValueError: the server declares no image, or the operator has no `bridge_image`.
    """
    job = jobs.build_job(task, tool, settings, traceparent)
    server_tool_pod(job["spec"]["template"]["spec"], tool, settings.bridge_image, settings.tool_defaults)
    return job


def server_tool_pod(
    pod: dict[str, Any], tool: ServerToolSpec, bridge_image: str | None, defaults: pod_shape.ToolDefaults | None
) -> None:
    """`server_pod` for calls of `tool`: the bridge calls that tool (`ENV_BRIDGE_TOOL`, with its idempotency),
    and the variables of the tool's container (the server's own and the embedded bridge's) are left out of
    the bridge's environment. A per-call Job's pod (`build_server_job`) and a warm worker's
    (`warm.build_deployment`) alike.

    Raises:
        ValueError: the server declares no image, or `bridge_image` is not set.
    """
    declared = {var.name for var in tool.manifest.container.env}  # the server's own and the bridge's: redone
    bridge_env = {
        ENV_BRIDGE_TOOL: tool.server_tool_name,
        ENV_BRIDGE_IDEMPOTENT: "true" if tool.execution.idempotent else "false",
    }
    # The tool's own taskSupport, as discovery wrote it into the generated tool (`servers.tool_specs`).
    bridge_env |= {
        var.name: var.value
        for var in tool.manifest.container.env
        if var.name == ENV_BRIDGE_TASK_SUPPORT and var.value is not None
    }
    server_pod(pod, tool.server, bridge_image, defaults, declared, bridge_env)


def server_pod(
    pod: dict[str, Any],
    server: ServerSpec,
    bridge_image: str | None,
    defaults: pod_shape.ToolDefaults | None,
    dropped: set[str],
    bridge_env: dict[str, str],
    args: tuple[str, ...] = (),
) -> None:
    """Turn the one-container pod of `jobs.build_job` (or of `warm.build_deployment`) into the server's: the
    sidecar (and the FIFOs' init container), and the bridge in place of the tool container
    (`python -m mcp_tasks.bridge *args`).

    Args:
        pod: the pod spec, changed in place; its container `tool` holds the operator's environment (the worker
            API's, or a warm worker's) and mounts (`/tmp`, the worker token or the warm pod's TLS files), then
            the server's own volume mounts, which go to the sidecar alone.
        server: the McpServer.
        bridge_image: the operator's (`OperatorSettings.bridge_image`).
        defaults: the release's `toolDefaults`, under the server's pod shape.
        dropped: environment variables of the container to leave out (the server's own: they are the sidecar's).
        bridge_env: the bridge's own variables besides `MCPTASKS_BRIDGE_SERVER`.
        args: the bridge's arguments (`("discover",)` for a discovery pod).

    Raises:
        ValueError: the server declares no image, or `bridge_image` is not set.
    """
    if not bridge_image:
        raise ValueError(
            f"McpServer {server.name!r} needs the bridge image: the operator's MCPTASKS_BRIDGE_IMAGE is not set "
            "(the chart sets it to its image)"
        )
    (bridge,) = pod["containers"]
    sidecar = server_container(server, defaults)
    target = json.dumps(bridge_target(server), separators=(",", ":"))
    own = {ENV_BRIDGE_SERVER, ENV_BRIDGE_TOOL, ENV_BRIDGE_IDEMPOTENT} | dropped
    bridge["env"] = [
        *(var for var in bridge["env"] if var["name"] not in own),  # the server's Secrets stay its own
        {"name": ENV_BRIDGE_SERVER, "value": target},
        *({"name": name, "value": value} for name, value in bridge_env.items()),
    ]
    bridge["image"] = bridge_image
    bridge["command"] = [*BRIDGE_COMMAND, *args]
    bridge["resources"] = json.loads(json.dumps(BRIDGE_RESOURCES))
    bridge.pop("envFrom", None)
    bridge.pop("workingDir", None)
    servers_mounts = (
        {mount.name for mount in server.manifest.container.volume_mounts} if server.manifest.container else set()
    )
    bridge["volumeMounts"] = [mount for mount in bridge["volumeMounts"] if mount["name"] not in servers_mounts]
    init: list[dict[str, Any]] = []
    volumes = [*pod["volumes"], {"name": SERVER_TMP_VOLUME, "emptyDir": {"sizeLimit": "256Mi"}}]
    if server.manifest.transport is Transport.STDIO:
        init.append(fifo_container(bridge_image))
        volumes.append({"name": FIFO_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}})
        bridge["volumeMounts"].append({"name": FIFO_VOLUME, "mountPath": FIFO_DIR})
        bridge["workingDir"] = FIFO_DIR  # the relay names the FIFOs relative to it
    init.append(sidecar)
    pod["initContainers"] = init
    pod["volumes"] = volumes
