"""The `McpTool` manifest: how a tool is declared, listed and executed.

One manifest format serves both deployments (ARCHITECTURE.md §Two deployments): the embedded
runner runs `spec.container.command` as a local process; the operator runs `spec.container.image`
as a Job. `spec.execution.taskPolicy` decides, per request, whether a `tools/call` becomes a task
(SEP-2663 leaves this to the server; there is no wire field). Parsing only; no file I/O here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final, Literal, cast

import jsonschema_specifications  # type: ignore[import-untyped]  # jsonschema's own dependency; no stubs
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for
from mcp_types import Tool, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012, specification_with

from mcp_tasks.protocol import constants, param_headers
from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.tasks.errors import InvalidToolManifest
from mcp_tasks.tasks.pod_shape import EnvFromSource, EnvVar, PodShape, Volume, VolumeMount

API_VERSION: Final = "mcptasks.io/v1alpha1"
KIND_TOOL: Final = "McpTool"
TOOL_NAME_PATTERN: Final = r"^[A-Za-z0-9_.-]{1,128}$"
SCOPE_TOKEN: Final = re.compile(r"[\x21\x23-\x5B\x5D-\x7E]{1,128}")
"""An OAuth scope token (RFC 6749 §3.3: printable ASCII without space, `"` or `\\`), bounded in length."""
NO_RETRIEVAL: Final[Registry[Any]] = cast("Registry[Any]", jsonschema_specifications.REGISTRY)
"""The registry every validator of a tool's schema gets: the JSON Schema metaschemas (bundled) and nothing
else, with no retrieval, so a `$ref` to any other URL is unresolvable and is never fetched (jsonschema's
deprecated default would `urlopen` it, unbounded, on the event loop)."""
_DATA_KEYWORDS: Final = frozenset({"const", "enum", "default", "examples"})
"""Keywords whose values are instances, not schemas (a `$ref` key inside them is data)."""


def schema_validator(schema: JsonObject) -> Validator:
    """A validator of `schema` in the dialect its `$schema` names (2020-12 without one), with no retrieval.

    A `$ref` that does not resolve inside `schema` raises `referencing.exceptions.Unresolvable` when a
    validation reaches it; `unresolvable_refs` finds those beforehand.
    """
    return validator_for(schema, default=Draft202012Validator)(schema, registry=NO_RETRIEVAL)


def unresolvable_refs(schema: JsonObject) -> list[str]:
    """The `$ref`/`$dynamicRef` values of `schema` that do not resolve inside it (a URL, a missing `$defs`).

    Refs are resolved against the root's base URI (`$id`, else none), without retrieval; subschemas that
    declare their own `$id` are registered too (`Registry.crawl`).
    """
    specification = specification_with(str(schema.get("$schema", "")), default=DRAFT202012)
    resource = specification.create_resource(schema)
    base = resource.id() or ""
    resolver = NO_RETRIEVAL.with_resource(base, resource).crawl().resolver(base_uri=base)
    refs: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item)
        elif isinstance(node, dict):
            for key, value in node.items():
                if key in ("$ref", "$dynamicRef", "$recursiveRef") and isinstance(value, str):
                    try:
                        resolver.lookup(value)
                    except Unresolvable:
                        refs.append(value)
                elif key not in _DATA_KEYWORDS:
                    walk(value)

    walk(schema)
    return refs


def _checked_schema(schema: JsonObject, what: str) -> JsonObject:
    """`schema` if it is a JSON Schema (its `$schema`'s dialect, 2020-12 without one) whose refs all resolve
    inside it; else `ValueError` naming `what` and the reason (the first bad ref).
    """
    try:
        validator_for(schema, default=Draft202012Validator).check_schema(schema)
    except SchemaError as exc:
        raise ValueError(
            f"{what} is not a valid JSON Schema (2020-12 unless $schema names another dialect): {exc.message}"
        ) from exc
    refs = unresolvable_refs(schema)
    if refs:
        raise ValueError(
            f"{what} has a $ref that does not resolve inside the schema: {refs[0][:200]!r} "
            "(remote references are never fetched)"
        )
    return schema


class TaskPolicy(StrEnum):
    """Whether a `tools/call` of this tool becomes a task (our server-side policy, SEP-2663 Negotiation).

    `never`: always answered synchronously, even when the client declared the extension (fast,
    deterministic queries). `optional`: a task when the request declared the extension, otherwise
    run synchronously within the tool's bounded wait. `required`: a task; a request without the
    extension gets -32021.
    """

    NEVER = "never"
    OPTIONAL = "optional"
    REQUIRED = "required"


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, use_attribute_docstrings=True)


class ExecutionSpec(_Spec):
    """`spec.execution` of an McpTool."""

    task_policy: TaskPolicy = Field(TaskPolicy.OPTIONAL, alias="taskPolicy")
    idempotent: bool = False
    """May a run whose outcome is unknown (lease lost) be started again from scratch?"""
    max_run_time_seconds: float = Field(600.0, alias="maxRunTimeSeconds", gt=0)
    """Limit of one run's working time, in seconds (time waiting for input does not count); past it the
    task is `failed`."""
    max_input_wait_seconds: float = Field(3600.0, alias="maxInputWaitSeconds", gt=0)
    """Longest wait for an answer to the tool's input requests, in seconds; past it the task is `failed`
    saying nobody answered."""
    sync_timeout_seconds: float = Field(30.0, alias="syncTimeoutSeconds", gt=0)
    """Bounded wait for a synchronous (non-task) run, in seconds."""
    poll_interval_ms: int = Field(1000, alias="pollIntervalMs", gt=0)
    """`pollIntervalMs` suggested to clients for this tool's tasks."""
    ttl_ms: int = Field(3_600_000, alias="ttlMs", gt=0)
    """Retention of a finished task, counted from `createdAt`, in ms; raised while the task runs."""
    cancel_grace_seconds: float = Field(5.0, alias="cancelGraceSeconds", ge=0)
    """Time between SIGTERM and SIGKILL when a running task is cancelled, in seconds."""
    handoff: bool | None = None
    """Hand a call without the tasks extension a task anyway: the task is created durably, owned by the
    caller, and the call answers at once with an ordinary `CallToolResult` naming it; the caller follows it
    with the `task_status`, `task_respond` and `task_cancel` tools (docs/handoff.md). Unset: the server's
    `MCPTASKS_HANDOFF_DEFAULT` (default false). Ignored for `taskPolicy: never`."""


class AutoscalingSpec(_Spec):
    """`spec.warm.autoscaling`: a HorizontalPodAutoscaler for the warm Deployment (Kubernetes only)."""

    target_cpu_utilization_percent: int = Field(70, alias="targetCPUUtilizationPercentage", ge=1, le=100)
    """Average CPU use, in percent of the requested CPU, the autoscaler keeps the workers at."""


class WarmSpec(_Spec):
    """`spec.warm`: the tool is served by warm workers, long-lived processes that take calls one after another.

    Without it every run starts its own process (embedded) or Job (Kubernetes). With it, synchronous calls
    go to a warm worker: no process start, and on Kubernetes no McpTask, Job or API write. Its tasks run on
    warm workers too, each under the runner's (embedded) or the operator's (Kubernetes) lease
    (docs/design.md §16).
    """

    concurrency: int = Field(1, ge=1, le=256)
    """Calls one worker runs at once (each in its own thread); more go to another worker or wait."""
    min_workers: int = Field(1, alias="minWorkers", ge=0, le=64)
    """Workers kept running even when idle, started with the server; 0 starts them on the first call.
    On Kubernetes: the Deployment's replicas (the autoscaler's minimum)."""
    max_workers: int = Field(4, alias="maxWorkers", ge=1, le=64)
    """Most workers at once; a call that finds all of them full waits for a free one (embedded), or the
    autoscaler's maximum (Kubernetes)."""
    idle_timeout_seconds: float = Field(300.0, alias="idleTimeoutSeconds", gt=0)
    """A worker above `minWorkers` with no call for this long is stopped (embedded), in seconds."""
    port: int = Field(8080, ge=1, le=65535)
    """The port a worker listens on in its pod (Kubernetes; embedded workers take a free loopback port)."""
    autoscaling: AutoscalingSpec | None = None
    """Kubernetes: scale the Deployment between `minWorkers` and `maxWorkers` on CPU (an HPA)."""
    resources: JsonObject | None = None
    """Kubernetes: the worker container's `resources` (requests and limits), as in a Pod spec."""

    @field_validator("max_workers")
    @classmethod
    def _at_least_min(cls, value: int, info: Any) -> int:
        minimum = info.data.get("min_workers", 1)
        if value < minimum:
            raise ValueError(f"maxWorkers ({value}) must be at least minWorkers ({minimum})")
        return value


class ContainerSpec(PodShape):
    """`spec.container`: what runs (image, command) and the shape of its pods on Kubernetes.

    `image` and `command` run in both deployments; the Kubernetes fields (`resources`, `env.valueFrom`,
    `envFrom`, `imagePullSecrets`, `nodeSelector`, `tolerations`, `affinity`, `serviceAccountName`,
    `volumes`, `runtimeClassName`, `priorityClassName`) go into the tool's Jobs and warm Deployment alike
    (docs/kubernetes.md §2); the embedded runner applies what has a local meaning (docs/tool-runtime.md §1).
    """

    image: str | None = Field(None, max_length=1024)
    """Container image of the tool (Kubernetes; the embedded runner ignores it)."""
    command: list[str] = Field(min_length=1)
    """argv of the tool process, at least one element (the container's `command`)."""
    env: list[EnvVar] = Field(default_factory=list, max_length=128)
    """Environment variables: `{name, value}` or `{name, valueFrom}` (a Secret or ConfigMap key, a pod field)."""
    env_from: list[EnvFromSource] = Field(default_factory=list, alias="envFrom", max_length=16)
    """Every key of a Secret or ConfigMap as variables (Kubernetes; ignored by the embedded runner)."""
    working_dir: str | None = Field(None, alias="workingDir")
    """Working directory (default: the image's; embedded: the manifest's folder, a relative path resolved
    against it)."""
    service_account_name: str | None = Field(None, alias="serviceAccountName", min_length=1, max_length=253)
    """ServiceAccount of the tool's pods, for workload identity (cloud IAM bound to the account); default:
    the release's tool account (`operator.toolServiceAccount`). Its token is mounted only with
    `automountServiceAccountToken: true`."""
    automount_service_account_token: bool = Field(False, alias="automountServiceAccountToken")
    """Mount the pod's ServiceAccount token at the standard path (default false: a tool needs none to reach
    mcp-tasks, which it proves itself to with its own projected token)."""
    volumes: list[Volume] = Field(default_factory=list, max_length=32)
    """ConfigMap, Secret and PersistentVolumeClaim volumes of the tool's pods (no other kinds)."""
    volume_mounts: list[VolumeMount] = Field(default_factory=list, alias="volumeMounts", max_length=32)
    """Where `volumes` appear in the tool container."""

    @model_validator(mode="after")
    def _mounts_name_volumes(self) -> ContainerSpec:
        names = [volume.name for volume in self.volumes]
        if len(set(names)) != len(names):
            raise ValueError("volumes: two volumes share a name")
        for mount in self.volume_mounts:
            if mount.name not in names:
                raise ValueError(f"volumeMounts: {mount.name!r} is not one of volumes")
        paths = [mount.mount_path.rstrip("/") for mount in self.volume_mounts]
        if len(set(paths)) != len(paths):
            raise ValueError("volumeMounts: two mounts share a mountPath")
        return self


class InputBeforeTask(_Spec):
    """One input request a tool needs before any task exists (pre-creation MRTR, SEP-2322)."""

    method: Literal["elicitation/create", "sampling/createMessage", "roots/list"]
    params: JsonObject = Field(default_factory=dict)


class ToolManifestSpec(_Spec):
    """`spec` of an McpTool: the MCP `Tool` fields plus how to run it."""

    name: str = Field(pattern=TOOL_NAME_PATTERN)
    title: str | None = None
    description: str = Field(min_length=1)
    input_schema: JsonObject = Field(alias="inputSchema")
    output_schema: JsonObject | None = Field(None, alias="outputSchema")
    annotations: JsonObject | None = None
    execution: ExecutionSpec = Field(default_factory=ExecutionSpec)
    required_client_capabilities: JsonObject = Field(default_factory=dict, alias="requiredClientCapabilities")
    input_before_task: dict[str, InputBeforeTask] = Field(default_factory=dict, alias="inputBeforeTask")
    container: ContainerSpec
    warm: WarmSpec | None = None
    required_scopes: list[str] = Field(
        default_factory=list,
        alias="requiredScopes",
        max_length=32,
        description=(
            "OAuth scopes a caller's token must hold to see and call this tool (all of them); empty: open to "
            "every authenticated principal. Principals without scopes (static or ServiceAccount tokens) may "
            "call every tool. Task methods stay owner-only whatever the scopes."
        ),
    )

    @field_validator("required_scopes")
    @classmethod
    def _scope_tokens(cls, scopes: list[str]) -> list[str]:
        for scope in scopes:
            if not SCOPE_TOKEN.fullmatch(scope):
                raise ValueError(f"requiredScopes: {scope!r} is not an OAuth scope token (RFC 6749 §3.3)")
        return scopes

    @field_validator("input_schema")
    @classmethod
    def _object_schema(cls, schema: JsonObject) -> JsonObject:
        if schema.get("type") != "object":
            raise ValueError('inputSchema must have "type": "object" at its root (MCP 2026-07-28 Tool)')
        return _checked_schema(schema, "inputSchema")

    @field_validator("output_schema")
    @classmethod
    def _output_schema(cls, schema: JsonObject | None) -> JsonObject | None:
        return None if schema is None else _checked_schema(schema, "outputSchema")


class ManifestMetadata(_Spec):
    """`metadata` of a manifest (Kubernetes object metadata; only `name` is read)."""

    model_config = ConfigDict(extra="allow")
    name: str


class ToolManifest(_Spec):
    """A whole `McpTool` object: `{apiVersion, kind, metadata, spec}`."""

    api_version: Literal["mcptasks.io/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["McpTool"]
    metadata: ManifestMetadata
    spec: ToolManifestSpec


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A validated tool, ready to list and run.

    `tool` is the wire `Tool` listed by `tools/list`; `source` names the manifest for error messages;
    `base_dir` is the manifest's folder (the embedded runner's working directory).
    """

    manifest: ToolManifestSpec
    tool: Tool
    source: str
    base_dir: str | None = None
    header_bindings: tuple[param_headers.HeaderBinding, ...] = ()
    """Arguments mirrored into `Mcp-Param-*` headers (`x-mcp-header`, SEP-2243)."""
    validator: Validator = field(repr=False, compare=False, default=None)  # type: ignore[assignment]  # set in __post_init__
    """Validates arguments in the dialect `inputSchema` names in `$schema` (2020-12 without one; MCP
    2025-11-25 Tool: draft-07 is common among existing servers)."""

    def __post_init__(self) -> None:
        schema = self.manifest.input_schema
        object.__setattr__(self, "validator", schema_validator(schema))

    @property
    def name(self) -> str:
        """The MCP tool name (`Tool.name`)."""
        return self.manifest.name

    @property
    def execution(self) -> ExecutionSpec:
        """Execution policy and limits."""
        return self.manifest.execution

    def hands_off(self, default: bool) -> bool:
        """Does a call without the tasks extension get a handed-off task (`execution.handoff`, else `default`,
        the server's `handoff_default`)? Never for `taskPolicy: never`: such a tool is not task-capable.
        """
        if self.execution.task_policy is TaskPolicy.NEVER:
            return False
        return default if self.execution.handoff is None else self.execution.handoff

    @property
    def required_scopes(self) -> frozenset[str]:
        """OAuth scopes a caller needs to see and call this tool (empty: every authenticated principal)."""
        return frozenset(self.manifest.required_scopes)

    @property
    def warm(self) -> WarmSpec | None:
        """How its warm workers run, or `None` when every run gets its own process or Job."""
        return self.manifest.warm

    def result_errors(self, result: JsonObject) -> list[str]:
        """Check a successful `CallToolResult` against `outputSchema`; return readable messages.

        A tool that declares `outputSchema` must return `structuredContent` that validates against it
        (MCP 2026-07-28 `server/tools` Output Schema); a result with `isError: true` is not checked.
        """
        schema = self.manifest.output_schema
        if schema is None or result.get("isError"):
            return []
        if "structuredContent" not in result:
            return ["the tool declares outputSchema, so its result must carry structuredContent"]
        try:
            errors = sorted(
                schema_validator(schema).iter_errors(result["structuredContent"]), key=lambda e: list(e.absolute_path)
            )
        except Unresolvable as exc:
            return [f"outputSchema cannot be checked: a $ref does not resolve inside it ({_clip(str(exc))})"]
        return [
            f"structuredContent/{'/'.join(str(p) for p in error.absolute_path) or '(root)'}: {_clip(error.message)}"
            for error in errors[:10]
        ]

    def argument_errors(self, arguments: JsonObject) -> list[str]:
        """Validate `arguments` against `inputSchema`; return readable messages (empty when valid).

        A `$ref` that does not resolve inside the schema (refused at load, so only a schema built otherwise)
        answers one message saying so; it is never fetched.
        """
        try:
            errors = sorted(self.validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
        except Unresolvable as exc:
            return [f"(root): inputSchema cannot be checked: a $ref does not resolve inside it ({_clip(str(exc))})"]
        return [
            f"{'/'.join(str(p) for p in error.absolute_path) or '(root)'}: {_clip(error.message)}"
            for error in errors[:10]
        ]


def _clip(message: str, limit: int = 200) -> str:
    """Bound a validation message: jsonschema quotes the offending value, which may be huge."""
    return message if len(message) <= limit else message[: limit - 1] + "…"


def parse_manifest(document: Any, source: str, base_dir: str | None = None) -> ToolSpec:
    """Validate one decoded `McpTool` document.

    Args:
        document: the decoded YAML/JSON object.
        source: where it came from (a path or `namespace/name`), used in error messages.
        base_dir: the manifest's folder; relative commands run there.

    Raises:
        InvalidToolManifest: the document is not a valid McpTool; the message names the field.
    """
    try:
        manifest = ToolManifest.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidToolManifest(f"{source}: invalid McpTool at {where}: {first['msg']}") from exc
    spec = manifest.spec
    for key, request in spec.input_before_task.items():
        if request.method not in constants.INPUT_METHOD_CAPABILITY:
            raise InvalidToolManifest(f"{source}: spec.inputBeforeTask.{key}.method is not an input request method")
    try:
        header_bindings = param_headers.bindings(spec.input_schema)
    except param_headers.InvalidHeaderAnnotation as exc:
        raise InvalidToolManifest(f"{source}: tool {spec.name!r}: invalid inputSchema: {exc}") from exc
    tool = Tool(
        name=spec.name,
        title=spec.title,
        description=spec.description,
        input_schema=spec.input_schema,
        output_schema=spec.output_schema,
        annotations=ToolAnnotations.model_validate(spec.annotations) if spec.annotations else None,
    )
    return ToolSpec(manifest=spec, tool=tool, source=source, base_dir=base_dir, header_bindings=header_bindings)
