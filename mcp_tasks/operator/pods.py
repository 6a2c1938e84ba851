"""What every pod the operator creates shares: the tool's container under the `restricted` Pod Security
profile, and the tool's pod shape. Pure functions, used by `jobs` (one Job per task) and `warm` (a warm
tool's Deployment).

Each tool container runs as uid/gid 65532 with a read-only root file system, no privilege escalation, no
capabilities and the runtime's default seccomp profile; `/tmp` is a size-limited `emptyDir`. The tool's
pod shape (`tasks.pod_shape`: resources, env sources, volumes, scheduling, its ServiceAccount), merged over
the release's `toolDefaults`, is added by `shape_container` and `shape_pod`: it never touches a
`securityContext`, and its models admit no field that would weaken the profile.
"""

from __future__ import annotations

from typing import Any, Final

from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.tasks import pod_shape
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
    """The tool's own `container.env`, as Kubernetes `EnvVar`s (`value` or `valueFrom`, passed through: the
    operator never reads a Secret's or ConfigMap's value).
    """
    return [var.model_dump(by_alias=True, exclude_none=True) for var in tool.manifest.container.env]


def _dump(value: Any) -> Any:
    if isinstance(value, list):
        return [_dump(item) for item in value]
    if isinstance(value, dict):
        return {key: _dump(item) for key, item in value.items()}
    if hasattr(value, "model_dump"):
        return value.model_dump(by_alias=True, exclude_none=True)
    return value


def shape_container(container: dict[str, Any], tool: ToolSpec, defaults: pod_shape.ToolDefaults | None) -> None:
    """Add `tool`'s container-level shape (over `defaults`) to the tool `container`: `resources`, `envFrom`,
    its `volumeMounts` after the operator's own.
    """
    spec = tool.manifest.container
    shape = pod_shape.merged(spec, defaults)
    if shape["resources"] is not None:
        container["resources"] = _dump(shape["resources"])
    if spec.env_from:
        container["envFrom"] = _dump(spec.env_from)
    container["volumeMounts"] = [*container["volumeMounts"], *_dump(spec.volume_mounts)]


_POD_FIELDS: Final = {
    "image_pull_secrets": "imagePullSecrets",
    "node_selector": "nodeSelector",
    "tolerations": "tolerations",
    "affinity": "affinity",
    "runtime_class_name": "runtimeClassName",
    "priority_class_name": "priorityClassName",
}


def shape_pod(pod_spec: dict[str, Any], tool: ToolSpec, defaults: pod_shape.ToolDefaults | None) -> None:
    """Add `tool`'s pod-level shape (over `defaults`) to `pod_spec`: scheduling fields, pull secrets, its
    volumes after the operator's own, its `serviceAccountName` and `automountServiceAccountToken` (false
    unless the tool asks). The `securityContext` stays the operator's.
    """
    spec = tool.manifest.container
    shape = pod_shape.merged(spec, defaults)
    for name, key in _POD_FIELDS.items():
        if shape[name]:
            pod_spec[key] = _dump(shape[name])
    pod_spec["volumes"] = [*pod_spec["volumes"], *_dump(spec.volumes)]
    if spec.service_account_name:
        pod_spec["serviceAccountName"] = spec.service_account_name
    pod_spec["automountServiceAccountToken"] = spec.automount_service_account_token


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
