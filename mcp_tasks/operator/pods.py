"""What every pod the operator creates shares: the tool's container under the `restricted` Pod Security
profile. Pure functions, used by `jobs` (one Job per task) and `warm` (a warm tool's Deployment).

Each tool container runs as uid/gid 65532 with a read-only root file system, no privilege escalation, no
capabilities and the runtime's default seccomp profile; `/tmp` is a size-limited `emptyDir`.
"""

from __future__ import annotations

from typing import Any, Final

from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.tasks.tools import ToolSpec

NONROOT_ID: Final = 65532
TMP_VOLUME_NAME: Final = "tmp"


def tmp_volume() -> dict[str, Any]:
    """The scratch volume mounted at `/tmp` (the root file system is read-only): an `emptyDir` of 256 MiB."""
    return {"name": TMP_VOLUME_NAME, "emptyDir": {"sizeLimit": "256Mi"}}


def image_of(tool: ToolSpec) -> str:
    """The tool's `container.image`.

    Raises:
        ValueError: it declares none (such a tool can only run embedded).
    """
    image = tool.manifest.container.image
    if not image:
        raise ValueError(f"tool {tool.name!r} declares no container.image; it cannot run on Kubernetes")
    return image


def declared_env(tool: ToolSpec) -> list[JsonObject]:
    """The tool's own `container.env`, as Kubernetes `EnvVar`s."""
    return [{"name": var.name, "value": var.value} for var in tool.manifest.container.env]


def tool_container(tool: ToolSpec, env: list[JsonObject], mounts: tuple[JsonObject, ...] = ()) -> dict[str, Any]:
    """The container named `tool` that runs the tool's image and command with `env`, `/tmp` and `mounts`.

    Raises:
        ValueError: the tool declares no `container.image`.
    """
    spec = tool.manifest.container
    container: dict[str, Any] = {
        "name": "tool",
        "image": image_of(tool),
        "command": list(spec.command),
        "env": env,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [{"name": TMP_VOLUME_NAME, "mountPath": "/tmp"}, *mounts],
    }
    if spec.working_dir:
        container["workingDir"] = spec.working_dir
    return container


def pod_security_context() -> dict[str, Any]:
    """The pod-level `securityContext`: non-root, uid, gid and fsGroup 65532."""
    return {"runAsNonRoot": True, "runAsUser": NONROOT_ID, "runAsGroup": NONROOT_ID, "fsGroup": NONROOT_ID}
