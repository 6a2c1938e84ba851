"""The pod shape of an McpTool: the Kubernetes fields of `spec.container` a platform team sets.

`resources`, `env` (plain values or `valueFrom` a Secret/ConfigMap key or a pod field), `envFrom`,
`imagePullSecrets`, `nodeSelector`, `tolerations`, `affinity`, `serviceAccountName`,
`automountServiceAccountToken`, ConfigMap/Secret/PersistentVolumeClaim `volumes` with `volumeMounts`,
`runtimeClassName` and `priorityClassName`: each a subset of the Kubernetes core/v1 field of that name,
with the same keys, so the operator copies them into the tool's Job and warm Deployment as they are
(`operator/pods.py`). Models only; no file I/O and no Kubernetes client here.

The restricted Pod Security profile cannot be weakened through them: every model forbids unknown keys
(no `securityContext`, `hostPath`, `privileged`, host namespaces, `mountPropagation`), volumes are only
of the three kinds above, and the names and paths the operator uses itself (`RESERVED_VOLUME_NAMES`,
`RESERVED_MOUNT_PATHS`) are refused. The CRD carries the same rules as CEL (`store/kubernetes/crds.py`),
so `kubectl apply` refuses what the model would. `ToolDefaults` is the chart's `toolDefaults`: merged
under each tool's own values by `merged` (the tool's value wins).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, WithJsonSchema, model_validator

from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.tasks import quantity

RESERVED_VOLUME_NAMES: Final = frozenset({"tmp", "worker-token"})
"""Volume names the operator gives its own volumes (`/tmp`, the worker token); a tool's volume may not take them."""
RESERVED_VOLUME_PREFIX: Final = "mcptasks-"
"""Prefix kept for volumes the operator may add later; a tool's volume name may not start with it."""
RESERVED_MOUNT_PATHS: Final = ("/tmp", "/var/run/secrets/mcp-tasks")
"""Mount paths the operator uses itself; a tool's `volumeMounts` may not be at or under them."""
NAME_MAX: Final = 253
LIST_MAX: Final = 64


def _number_to_text(value: Any) -> Any:
    """YAML `cpu: 2` is an integer; a quantity is kept as text."""
    return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


Quantity = Annotated[
    str,
    BeforeValidator(_number_to_text),
    Field(pattern=quantity.QUANTITY_PATTERN, max_length=64),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": quantity.QUANTITY_PATTERN,
            "maxLength": 64,
            "x-kubernetes-int-or-string": True,
        }
    ),
]
"""A Kubernetes quantity (`250m`, `128Mi`, `1.5Gi`, `2`): an integer or a string of that grammar."""
Name = Annotated[str, Field(min_length=1, max_length=NAME_MAX)]


class _K8s(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, use_attribute_docstrings=True)


class ResourceRequirements(_K8s):
    """Compute resources of the tool container (core/v1 `ResourceRequirements`); each key a resource name
    (`cpu`, `memory`, `ephemeral-storage`, an extended resource such as `nvidia.com/gpu`).
    """

    requests: dict[str, Quantity] = Field(default_factory=dict, max_length=8)
    """Resources the scheduler reserves for the container: resource name → quantity (`cpu: 250m`,
    `memory: 128Mi`). A ResourceQuota on requests counts these."""
    limits: dict[str, Quantity] = Field(default_factory=dict, max_length=8)
    """Most the container may use: resource name → quantity. Past `memory` the kernel kills it
    (`OOMKilled`); `cpu` is throttled. The embedded runner applies `memory` as the process's address-space
    limit (docs/tool-runtime.md). A request may not exceed its limit."""

    @model_validator(mode="after")
    def _requests_within_limits(self) -> ResourceRequirements:
        for name, request in self.requests.items():
            limit = self.limits.get(name)
            if limit is not None and quantity.value_of(request) > quantity.value_of(limit):
                raise ValueError(f"resources.requests.{name} ({request}) exceeds resources.limits.{name} ({limit})")
        return self


class KeySelector(_K8s):
    """A key of a Secret or ConfigMap in the tool's namespace (core/v1 `SecretKeySelector`/`ConfigMapKeySelector`)."""

    name: Name
    """Name of the Secret or ConfigMap."""
    key: Name
    """The key whose value is used."""
    optional: bool | None = None
    """Start the container even when the object or key is missing (the variable is then unset)."""


class ObjectFieldSelector(_K8s):
    """A field of the pod (core/v1 `ObjectFieldSelector`)."""

    field_path: str = Field(alias="fieldPath", min_length=1, max_length=256)
    """Path of the field, e.g. `metadata.name`, `metadata.namespace`, `status.podIP`, `spec.nodeName`."""
    api_version: str | None = Field(None, alias="apiVersion", max_length=64)
    """Version of the schema the path is written in (default `v1`)."""


class EnvVarSource(_K8s):
    """Where a variable's value comes from (core/v1 `EnvVarSource`); exactly one of the fields. The operator
    never reads the value: the kubelet resolves it when it starts the container.
    """

    secret_key_ref: KeySelector | None = Field(None, alias="secretKeyRef")
    """A key of a Secret (a credential the tool needs: its value never passes through mcp-tasks)."""
    config_map_key_ref: KeySelector | None = Field(None, alias="configMapKeyRef")
    """A key of a ConfigMap."""
    field_ref: ObjectFieldSelector | None = Field(None, alias="fieldRef")
    """A field of the pod (its name, namespace, IP, node)."""

    @model_validator(mode="after")
    def _exactly_one(self) -> EnvVarSource:
        if sum(x is not None for x in (self.secret_key_ref, self.config_map_key_ref, self.field_ref)) != 1:
            raise ValueError("valueFrom needs exactly one of secretKeyRef, configMapKeyRef, fieldRef")
        return self


class EnvVar(_K8s):
    """One `spec.container.env` entry (core/v1 `EnvVar`): a plain `value` or a `valueFrom` source, not both."""

    name: Annotated[str, Field(min_length=1, max_length=NAME_MAX)]
    """Name of the environment variable."""
    value: str | None = None
    """Its value (plain text: do not put credentials here, use `valueFrom.secretKeyRef`)."""
    value_from: EnvVarSource | None = Field(None, alias="valueFrom")
    """Take the value from a Secret key, a ConfigMap key or a pod field (Kubernetes; the embedded runner
    reads Secret and ConfigMap keys from files, docs/tool-runtime.md)."""

    @model_validator(mode="after")
    def _one_source(self) -> EnvVar:
        if (self.value is None) == (self.value_from is None):
            raise ValueError(f"env {self.name!r} needs exactly one of value and valueFrom")
        return self


class ObjectReference(_K8s):
    """A Secret or ConfigMap by name (core/v1 `SecretEnvSource`/`ConfigMapEnvSource`)."""

    name: Name
    """Name of the Secret or ConfigMap in the tool's namespace."""
    optional: bool | None = None
    """Start the container even when it is missing."""


class EnvFromSource(_K8s):
    """All keys of a Secret or ConfigMap as environment variables (core/v1 `EnvFromSource`); exactly one of
    `secretRef` and `configMapRef`.
    """

    prefix: str | None = Field(None, max_length=NAME_MAX)
    """Prepended to every key to make the variable's name."""
    secret_ref: ObjectReference | None = Field(None, alias="secretRef")
    """The Secret whose keys become variables."""
    config_map_ref: ObjectReference | None = Field(None, alias="configMapRef")
    """The ConfigMap whose keys become variables."""

    @model_validator(mode="after")
    def _exactly_one(self) -> EnvFromSource:
        if (self.secret_ref is None) == (self.config_map_ref is None):
            raise ValueError("envFrom entries need exactly one of secretRef and configMapRef")
        return self


class LocalObjectReference(_K8s):
    """An object in the tool's namespace by name (core/v1 `LocalObjectReference`)."""

    name: Name
    """Its name."""


class Toleration(_K8s):
    """Lets the tool's pods run on nodes with a matching taint (core/v1 `Toleration`), e.g. GPU nodes."""

    key: str | None = Field(None, max_length=NAME_MAX)
    """Taint key it tolerates; empty with `operator: Exists` tolerates every taint."""
    operator: Literal["Exists", "Equal"] | None = None
    """`Equal` (default: the taint's value must be `value`) or `Exists` (any value)."""
    value: str | None = Field(None, max_length=NAME_MAX)
    """Taint value it tolerates (with `operator: Equal`)."""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    """Taint effect it tolerates; empty: all effects."""
    toleration_seconds: int | None = Field(None, alias="tolerationSeconds", ge=0)
    """With `NoExecute`: how long the pod stays once the taint appears, in seconds; empty: forever."""


class Affinity(_K8s):
    """Scheduling constraints of the tool's pods (core/v1 `Affinity`), each part as in a Pod spec."""

    node_affinity: JsonObject | None = Field(None, alias="nodeAffinity")
    """core/v1 `NodeAffinity`: which nodes the pods may (`required...`) or prefer to (`preferred...`) run on,
    by node labels."""
    pod_affinity: JsonObject | None = Field(None, alias="podAffinity")
    """core/v1 `PodAffinity`: run near pods with matching labels."""
    pod_anti_affinity: JsonObject | None = Field(None, alias="podAntiAffinity")
    """core/v1 `PodAntiAffinity`: run away from pods with matching labels (e.g. spread warm workers)."""


class KeyToPath(_K8s):
    """One key of a ConfigMap or Secret volume as a file (core/v1 `KeyToPath`)."""

    key: Name
    """The key."""
    path: str = Field(min_length=1, max_length=NAME_MAX, pattern=r"^[^/]")
    """Relative path of its file in the volume (no leading `/`; `..` is refused by the API server)."""
    mode: int | None = Field(None, ge=0, le=0o777)
    """File mode bits (decimal in JSON, e.g. 256 for 0400)."""


class ConfigMapVolumeSource(_K8s):
    """A ConfigMap's keys as files (core/v1 `ConfigMapVolumeSource`)."""

    name: Name
    """The ConfigMap."""
    items: list[KeyToPath] | None = Field(None, max_length=LIST_MAX)
    """Only these keys, at these paths; empty: every key, named after it."""
    default_mode: int | None = Field(None, alias="defaultMode", ge=0, le=0o777)
    """Mode bits of the files (decimal in JSON; default 0644)."""
    optional: bool | None = None
    """Start the pod even when the ConfigMap is missing."""


class SecretVolumeSource(_K8s):
    """A Secret's keys as files (core/v1 `SecretVolumeSource`)."""

    secret_name: Name = Field(alias="secretName")
    """The Secret."""
    items: list[KeyToPath] | None = Field(None, max_length=LIST_MAX)
    """Only these keys, at these paths; empty: every key, named after it."""
    default_mode: int | None = Field(None, alias="defaultMode", ge=0, le=0o777)
    """Mode bits of the files (decimal in JSON; default 0644)."""
    optional: bool | None = None
    """Start the pod even when the Secret is missing."""


class ClaimVolumeSource(_K8s):
    """A PersistentVolumeClaim in the tool's namespace (core/v1 `PersistentVolumeClaimVolumeSource`)."""

    claim_name: Name = Field(alias="claimName")
    """The claim."""
    read_only: bool | None = Field(None, alias="readOnly")
    """Mount it read-only."""


class Volume(_K8s):
    """A volume of the tool's pods (core/v1 `Volume`): exactly one of `configMap`, `secret` and
    `persistentVolumeClaim`. No other kind (no `hostPath`): the restricted Pod Security profile is kept.
    """

    name: Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]
    """Its name (a DNS label), which `volumeMounts` refer to; not `tmp`, `worker-token` or `mcptasks-*`."""
    config_map: ConfigMapVolumeSource | None = Field(None, alias="configMap")
    """A ConfigMap's keys as files."""
    secret: SecretVolumeSource | None = None
    """A Secret's keys as files."""
    persistent_volume_claim: ClaimVolumeSource | None = Field(None, alias="persistentVolumeClaim")
    """A PersistentVolumeClaim."""

    @model_validator(mode="after")
    def _one_kind(self) -> Volume:
        kinds = (self.config_map, self.secret, self.persistent_volume_claim)
        if sum(kind is not None for kind in kinds) != 1:
            raise ValueError(f"volume {self.name!r} needs exactly one of configMap, secret, persistentVolumeClaim")
        if self.name in RESERVED_VOLUME_NAMES or self.name.startswith(RESERVED_VOLUME_PREFIX):
            raise ValueError(f"volume name {self.name!r} is the operator's own; choose another")
        return self


class VolumeMount(_K8s):
    """Where a volume appears in the tool container (core/v1 `VolumeMount`)."""

    name: Name
    """The volume's `name` (one of `volumes`)."""
    mount_path: str = Field(alias="mountPath", min_length=2, max_length=1024, pattern=r"^/")
    """Absolute path in the container; not at or under `/tmp` or `/var/run/secrets/mcp-tasks`."""
    sub_path: str | None = Field(None, alias="subPath", max_length=1024)
    """Mount only this path inside the volume."""
    read_only: bool | None = Field(None, alias="readOnly")
    """Mount it read-only (Secret and ConfigMap volumes always are)."""

    @model_validator(mode="after")
    def _not_ours(self) -> VolumeMount:
        path = self.mount_path.rstrip("/")
        if any(path == own or path.startswith(own + "/") for own in RESERVED_MOUNT_PATHS):
            raise ValueError(f"mountPath {self.mount_path!r} is where the operator mounts its own volumes")
        return self


class PodShape(_K8s):
    """The Kubernetes fields of `spec.container` besides image and command: shared by `ContainerSpec` and
    the release's `ToolDefaults`. Every field is optional; absent means Kubernetes' default.
    """

    resources: ResourceRequirements | None = None
    """Requests and limits of the tool container (a namespace with a cpu/memory ResourceQuota needs them;
    the chart's `toolDefaults.resources` gives every tool some). Embedded: `limits.memory` only."""
    image_pull_secrets: list[LocalObjectReference] | None = Field(None, alias="imagePullSecrets", max_length=16)
    """Secrets (type `kubernetes.io/dockerconfigjson`) holding the credentials of a private registry."""
    node_selector: dict[str, Annotated[str, Field(max_length=63)]] | None = Field(
        None, alias="nodeSelector", max_length=32
    )
    """Node labels the tool's pods require (label → value), e.g. `nvidia.com/gpu.present: "true"`."""
    tolerations: list[Toleration] | None = Field(None, max_length=32)
    """Taints the tool's pods tolerate (GPU or dedicated nodes)."""
    affinity: Affinity | None = None
    """Node and pod affinity of the tool's pods, as in a Pod spec."""
    runtime_class_name: Name | None = Field(None, alias="runtimeClassName")
    """RuntimeClass of the tool's pods, e.g. a sandboxed runtime (gVisor, Kata) for untrusted tools."""
    priority_class_name: Name | None = Field(None, alias="priorityClassName")
    """PriorityClass of the tool's pods (scheduling order and preemption)."""


class ToolDefaults(PodShape):
    """Release-wide defaults of every McpTool's pod shape (the chart's `toolDefaults`,
    `MCPTASKS_TOOL_DEFAULTS` as JSON). A tool's own value wins: per key for `resources.requests`,
    `resources.limits` and `nodeSelector`, per field for the rest; `imagePullSecrets` and `tolerations`
    are the union.
    """


SHAPE_FIELDS: Final = tuple(PodShape.model_fields)
"""The Python names of the fields `ToolDefaults` and a tool's container share."""


def ignored_locally(container: BaseModel) -> list[str]:
    """The `spec.container` settings of `container` (a `ContainerSpec`) that the embedded runner ignores, by
    their manifest names: every Kubernetes-only field set, `env[NAME].valueFrom` entries, and every resource
    but `limits.memory` (the one it applies). Empty when it applies all of them.
    """
    ignored: list[str] = []
    for name, info in type(container).model_fields.items():
        value = getattr(container, name)
        if name in ("image", "command", "env", "working_dir", "resources") or not value:
            continue
        if name == "automount_service_account_token" and value is False:
            continue
        ignored.append(info.alias or name)
    ignored += [f"env[{var.name}].valueFrom" for var in getattr(container, "env", []) if var.value_from is not None]
    resources = getattr(container, "resources", None)
    if resources is not None:
        ignored += [f"resources.requests.{key}" for key in resources.requests]
        ignored += [f"resources.limits.{key}" for key in resources.limits if key != "memory"]
    return ignored


def merged(own: PodShape, defaults: ToolDefaults | None) -> dict[str, Any]:
    """`own`'s pod-shape fields over `defaults`, by Python field name (`None`: unset in both).

    `resources`: requests and limits merged per resource name (the tool's quantity wins; a default limit
    below the tool's own request rises to that request, a default request above the tool's own limit falls
    to that limit, so the merge never breaks requests <= limits and a quota still sees both).
    `nodeSelector`: merged per label. `imagePullSecrets`, `tolerations`: the defaults' then the tool's,
    without repeats. Others: the tool's value, else the default.
    """
    result: dict[str, Any] = {name: getattr(own, name) for name in SHAPE_FIELDS}
    if defaults is None:
        return result
    for name in SHAPE_FIELDS:
        mine, theirs = getattr(own, name), getattr(defaults, name)
        if theirs is None:
            continue
        if mine is None:
            result[name] = theirs
        elif name == "resources":
            result[name] = _merged_resources(mine, theirs)
        elif name == "node_selector":
            result[name] = {**theirs, **mine}
        elif name in ("image_pull_secrets", "tolerations"):
            result[name] = [*theirs, *(item for item in mine if item not in theirs)]
    return result


def _merged_resources(own: ResourceRequirements, defaults: ResourceRequirements) -> ResourceRequirements:
    requests = {**defaults.requests, **own.requests}
    limits = {**defaults.limits, **own.limits}
    for name, limit in list(limits.items()):
        request = requests.get(name)
        if name not in own.limits and request is not None and quantity.value_of(request) > quantity.value_of(limit):
            limits[name] = request  # the tool asks for more than the default limit: the limit rises to it
    for name, wanted in list(requests.items()):
        ceiling = limits.get(name)
        if name not in own.requests and ceiling is not None and quantity.value_of(wanted) > quantity.value_of(ceiling):
            requests[name] = ceiling  # a default request above the tool's own limit: ask for the limit
    return ResourceRequirements(requests=requests, limits=limits)


def parse_defaults(text: str) -> ToolDefaults:
    """`ToolDefaults` from JSON text (`MCPTASKS_TOOL_DEFAULTS`; the chart writes `toolDefaults` as JSON).

    A top-level key whose value is empty (`""`, `[]`, `{}`, `null`) is unset, as the chart's empty defaults are.

    Raises:
        ValueError: not a JSON object, or not a valid `ToolDefaults` (the message names the field).
    """
    try:
        data = json.loads(text or "{}")
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError("must be a JSON object")
    try:
        return ToolDefaults.model_validate(
            {key: value for key, value in data.items() if value not in ("", [], {}, None)}
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(root)"
        raise ValueError(f"invalid tool defaults at {where}: {first['msg']}") from exc
