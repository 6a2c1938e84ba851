"""The `McpServer` manifest: an existing MCP server whose tools become durable task tools.

One manifest format serves both deployments, as `McpTool`'s does (`tasks/tools.py`): embedded, the
McpServer YAML sits in a `--tools` folder and `spec.container.command` runs locally; on Kubernetes it is
a CR whose `spec.container.image` runs, unmodified, in a Job or warm pod. The server's tools are not
declared here: discovery (`tools/list` in the server's own era) finds them, and `tool_specs` turns each
listed `Tool` into an ordinary `ToolSpec` whose command is the bridge (`mcp_tasks.bridge`), the server's
MCP client that runs beside it. So leases, adoption, deadlines and the outcome rule hold unchanged.
Parsing and pure mapping only; no I/O here (docs/mcp-servers.md).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import PurePath
from typing import Any, Final, Literal

from mcp_types import Tool
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.runtime import contract
from mcp_tasks.tasks.errors import InvalidToolManifest
from mcp_tasks.tasks.tools import (
    ContainerSpec,
    ExecutionSpec,
    ManifestMetadata,
    ToolSpec,
    WarmSpec,
    parse_manifest,
)

KIND_SERVER: Final = "McpServer"
ENV_BRIDGE_SERVER: Final = contract.ENV_BRIDGE_SERVER
"""The bridge's view of its server, as JSON (`bridge_target`): how to start and reach it."""
ENV_BRIDGE_TOOL: Final = contract.ENV_BRIDGE_TOOL
"""The server's own name of the tool the bridge calls (without `toolNamePrefix`)."""
ENV_BRIDGE_IDEMPOTENT: Final = contract.ENV_BRIDGE_IDEMPOTENT
"""`true` when the tool is idempotent: the bridge re-sends a call the server lost to a fresh server."""
ENV_BRIDGE_TASK_SUPPORT: Final = contract.ENV_BRIDGE_TASK_SUPPORT
"""The tool's own `execution.taskSupport` (`optional`, `required`): the bridge runs calls as the server's tasks."""
BRIDGE_MODULE: Final = "mcp_tasks.bridge"
MAX_SERVER_TOOLS: Final = 1000
"""Most tools one McpServer may list (docs/mcp-servers.md §Limits). A larger listing is refused whole: the
server keeps the tools it had. Each listed tool costs about 1 ms of gateway CPU to check (its schemas against
their metaschema), more for large schemas."""
"""`python -m mcp_tasks.bridge` runs one call (or, warm, serves calls) against the server."""


class Transport(StrEnum):
    """How the bridge reaches the server (MCP 2025-06-18 and later, Transports)."""

    STDIO = "stdio"
    """The server is the bridge's child; JSON-RPC on its stdin/stdout, newline-delimited."""
    STREAMABLE_HTTP = "streamable-http"
    """The server listens on `http.port` at `http.path` (or is already running at `http.url`)."""


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, use_attribute_docstrings=True)


class HttpSpec(_Spec):
    """`spec.http` of a Streamable HTTP server."""

    port: int = Field(3001, ge=1, le=65535)
    """The port the server listens on (in its pod; embedded: on loopback, see `portEnv`)."""
    path: str = Field("/mcp", pattern=r"^/[\x21-\x7E]*$", max_length=1024)
    """The MCP endpoint's path."""
    port_env: str | None = Field(None, alias="portEnv", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    """Embedded: the environment variable the server reads its port from (e.g. `PORT`); the bridge then
    gives each server process a free loopback port in it, so concurrent per-call servers never clash.
    Unset: the server is started as declared and reached on `port`."""
    url: str | None = Field(None, pattern=r"^https?://", max_length=2048)
    """Embedded only: a server already running at this URL (then `container` is not started)."""


class ServerToolExecution(ExecutionSpec):
    """Execution fields of a server tool; only the ones given override `toolDefaults.execution`."""


class ToolDefaults(_Spec):
    """`spec.toolDefaults`: what every tool of the server gets unless `spec.tools.<name>` says otherwise."""

    execution: ServerToolExecution = Field(default_factory=ServerToolExecution)
    """McpTool `execution` fields. `idempotent`, unless given, follows each tool's annotations
    (`idempotentHint` or `readOnlyHint` true: a run with an unknown outcome may start again)."""


class ServerToolOverride(_Spec):
    """`spec.tools.<server tool name>`: per-tool settings."""

    execution: ServerToolExecution | None = None
    """McpTool `execution` fields, each one given overriding `toolDefaults.execution`."""
    required_scopes: list[str] | None = Field(None, alias="requiredScopes", max_length=32)
    """As McpTool's `requiredScopes` (default: `toolDefaults`' none, open to every principal)."""
    required_client_capabilities: JsonObject | None = Field(None, alias="requiredClientCapabilities")
    """As McpTool's `requiredClientCapabilities`."""
    expose: bool = True
    """false: the tool is neither listed nor callable."""


class ServerManifestSpec(_Spec):
    """`spec` of an McpServer."""

    transport: Transport = Transport.STDIO
    container: ContainerSpec | None = None
    """As McpTool's `container`: what runs (embedded: `command` in `workingDir`; Kubernetes: `image`).
    Required unless `http.url` names a running server."""
    http: HttpSpec | None = None
    """Where a `streamable-http` server listens (required for that transport)."""
    tool_defaults: ToolDefaults = Field(default_factory=ToolDefaults, alias="toolDefaults")
    tools: dict[str, ServerToolOverride] = Field(default_factory=dict, max_length=1024)
    """Per-tool settings, by the server's own tool name."""
    warm: WarmSpec | None = None
    """As McpTool's `warm`: long-lived server processes (pods) taking concurrent calls over one connection."""
    tool_name_prefix: str = Field("", alias="toolNamePrefix", pattern=r"^[A-Za-z0-9_.-]{0,64}$")
    """Prepended to each listed tool name (`time_` makes `get_current_time` `time_get_current_time`)."""
    discovery_timeout_seconds: float = Field(60.0, alias="discoveryTimeoutSeconds", gt=0, le=3600)
    """Longest the start, handshake and `tools/list` of discovery may take, in seconds."""
    resync_interval_seconds: float = Field(600.0, alias="resyncIntervalSeconds", ge=0, le=86400)
    """How often discovery runs again, in seconds (a new server version, a `tools/list_changed`): tools the
    server no longer lists go, new ones come. 0: discovered once (embedded: at start-up)."""

    @model_validator(mode="after")
    def _reachable(self) -> ServerManifestSpec:
        if self.transport is Transport.STREAMABLE_HTTP and self.http is None:
            raise ValueError("transport streamable-http needs spec.http ({port, path})")
        if self.transport is Transport.STDIO and self.http is not None:
            raise ValueError("spec.http is for transport streamable-http only")
        if self.container is None and (self.http is None or self.http.url is None):
            raise ValueError("spec.container is required (unless spec.http.url names a running server)")
        return self


class ServerManifest(_Spec):
    """A whole `McpServer` object: `{apiVersion, kind, metadata, spec}` (`status` is ignored here)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    api_version: Literal["mcptasks.io/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["McpServer"]
    metadata: ManifestMetadata
    spec: ServerManifestSpec


@dataclass(frozen=True, slots=True)
class ServerSpec:
    """A validated McpServer.

    `name` is `metadata.name`, `source` names it in messages, `base_dir` is the manifest's folder (the
    embedded working directory).
    """

    manifest: ServerManifestSpec
    name: str
    source: str
    base_dir: str | None = None


@dataclass(frozen=True, slots=True)
class Discovery:
    """What discovery learnt of a server: its handshake and its whole (paginated) `tools/list`.

    `protocol_version` is the revision the server speaks (`initialize`'s answer, or the one chosen from
    `server/discover`); `server_info` the `Implementation` (`{name, version, title?, ...}`); `tools` every
    listed `Tool` as the server sent it (JSON objects, verbatim, in listing order).
    """

    protocol_version: str
    server_info: JsonObject
    tools: tuple[JsonObject, ...]
    capabilities: JsonObject = field(default_factory=dict)
    instructions: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerToolSpec(ToolSpec):
    """A `ToolSpec` listed by an McpServer: run by the bridge, validated in its schema's own dialect."""

    server: ServerSpec
    server_tool_name: str
    """The tool's name on the server (without `toolNamePrefix`)."""
    listed: JsonObject
    """The `Tool` exactly as the server listed it."""


def parse_server_manifest(document: Any, source: str, base_dir: str | None = None) -> ServerSpec:
    """Validate one decoded `McpServer` document.

    Args:
        document: the decoded YAML/JSON object.
        source: where it came from (a path or `namespace/name`), used in error messages.
        base_dir: the manifest's folder; the server's relative `workingDir` and command run there.

    Raises:
        InvalidToolManifest: the document is not a valid McpServer; the message names the field.
    """
    try:
        manifest = ServerManifest.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidToolManifest(f"{source}: invalid McpServer at {where}: {first['msg']}") from exc
    return ServerSpec(manifest=manifest.spec, name=manifest.metadata.name, source=source, base_dir=base_dir)


def is_server_document(document: object) -> bool:
    """Tell whether a decoded manifest document is an McpServer (else it is read as an McpTool)."""
    return isinstance(document, dict) and document.get("kind") == KIND_SERVER


def bridge_target(server: ServerSpec) -> JsonObject:
    """The bridge's view of `server` (the JSON in `ENV_BRIDGE_SERVER`).

    Shape: `{"transport": "stdio"|"streamable-http", "command": [str]|null, "env": {name: value},
    "workingDir": str|null, "http": {"port", "path", "portEnv", "url"}|null, "server": str}`. `env` holds
    only plain `value`s (embedded; `valueFrom` is Kubernetes' and resolved in the pod); `workingDir` is
    resolved against the manifest's folder.
    """
    spec = server.manifest
    container = spec.container
    working_dir: str | None = None
    if container is not None:
        working_dir = container.working_dir
        if server.base_dir is not None:
            working_dir = str(PurePath(server.base_dir, working_dir)) if working_dir else server.base_dir
    return {
        "server": server.name,
        "transport": spec.transport.value,
        "command": list(container.command) if container is not None else None,
        "env": {item.name: item.value for item in container.env if item.value is not None} if container else {},
        "workingDir": working_dir,
        "http": spec.http.model_dump(by_alias=True) if spec.http is not None else None,
    }


def _task_support(listed: Mapping[str, Any]) -> str | None:
    """The tool's own 2025-11-25 `execution.taskSupport` when the bridge runs its calls as the server's tasks
    (`optional`, `required`); None for `forbidden`, absent or anything else (plain calls).
    """
    execution = listed.get("execution")
    support = execution.get("taskSupport") if isinstance(execution, dict) else None
    return support if support in {"optional", "required"} else None


def _annotated_idempotent(listed: Mapping[str, Any]) -> bool:
    """Tell whether the tool's own annotations make a re-run safe (`idempotentHint` or `readOnlyHint` true)."""
    annotations = listed.get("annotations")
    if not isinstance(annotations, dict):
        return False
    return annotations.get("idempotentHint") is True or annotations.get("readOnlyHint") is True


def _execution(server: ServerManifestSpec, tool_name: str, listed: Mapping[str, Any]) -> JsonObject:
    """The tool's `execution`: annotations' idempotency, then `toolDefaults`, then the per-tool fields given."""
    merged: JsonObject = {"idempotent": _annotated_idempotent(listed)}
    merged |= server.tool_defaults.execution.model_dump(by_alias=True, exclude_unset=True, mode="json")
    override = server.tools.get(tool_name)
    if override is not None and override.execution is not None:
        merged |= override.execution.model_dump(by_alias=True, exclude_unset=True, mode="json")
    return merged


def _check_schema(schema: object, what: str) -> JsonObject:
    """A listed schema, if it is a JSON object; `parse_manifest` checks it is a JSON Schema in its dialect
    whose refs resolve inside it (`tools._checked_schema`), once.
    """
    if not isinstance(schema, dict):
        raise ValueError(f"{what} is not a JSON object")
    return schema


DEFAULT_FOLLOW_TOOLS: Final = ("task_status", "task_respond", "task_cancel")
"""The handoff follow tools' default names (`GatewaySettings.handoff_*_tool`), taken for server tools."""


def too_many_tools(server: ServerSpec, discovery: Discovery) -> str | None:
    """Why `discovery` is refused whole (it lists more than `MAX_SERVER_TOOLS` tools), or `None`."""
    count = len(discovery.tools)
    if count <= MAX_SERVER_TOOLS:
        return None
    return (
        f"{server.source}: the server lists {count} tools, more than the {MAX_SERVER_TOOLS} one McpServer may "
        "serve; none of this listing is served (split the server, or expose fewer tools)"
    )


def listing_digest(discovery: Discovery) -> str:
    """A SHA-256 hex digest of what discovery found (protocol version, server info, tools verbatim).

    Two discoveries with the same digest give the same `tool_specs` for the same McpServer spec.
    """
    listing = [discovery.protocol_version, discovery.server_info, list(discovery.tools)]
    return hashlib.sha256(json.dumps(listing, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def tool_specs(
    server: ServerSpec,
    discovery: Discovery,
    bridge_command: Sequence[str],
    follow_tools: Collection[str] = DEFAULT_FOLLOW_TOOLS,
) -> tuple[list[ServerToolSpec], list[str]]:
    """The server's listed tools as `ToolSpec`s run by the bridge, and why any listed tool was left out.

    Each spec's `tool` is the listed `Tool` (name prefixed), its schemas, title, annotations and icons
    verbatim; its command is `bridge_command` (e.g. `["python", "-m", "mcp_tasks.bridge"]`) with the server
    in `ENV_BRIDGE_SERVER` and the tool's server name in `ENV_BRIDGE_TOOL`. A tool with `expose: false` is
    left out silently; one whose name (with prefix) is not a valid MCP tool name, or whose `inputSchema` is
    not a JSON Schema object, is left out with a reason; so is a `spec.tools` key the server did not list.
    A tool whose name (with prefix) is a handoff follow tool's is left out with a reason: the follow tools
    are how hosts without the tasks extension follow tasks (docs/handoff.md), so no server tool takes
    their name over. A name the listing repeats is served once, the first listed, with a reason for the
    others (a listing bug, e.g. across pages, should not cost the server its tools).

    Args:
        server: the parsed McpServer.
        discovery: what discovery found (`tools` verbatim).
        bridge_command: argv of the bridge (first element `python` means the runner's own interpreter).
        follow_tools: the handoff follow tools' names (`GatewaySettings.follow_tool_names()`).

    Returns:
        `(specs, refusals)`: specs in listing order; refusals are readable sentences naming the tool. A
        listing of more than `MAX_SERVER_TOOLS` tools gives no specs and one refusal (`too_many_tools`).
    """
    spec = server.manifest
    too_many = too_many_tools(server, discovery)
    if too_many is not None:
        return [], [too_many]
    target = json.dumps(bridge_target(server), separators=(",", ":"))
    specs: list[ServerToolSpec] = []
    refusals: list[str] = []
    seen: set[str] = set()
    for listed in discovery.tools:
        server_name = listed.get("name")
        if not isinstance(server_name, str):
            refusals.append(f"{server.source}: a listed tool has no name")
            continue
        if server_name in seen:
            refusals.append(f"{server.source}: tool {server_name!r} is listed twice; the first listed is served")
            continue
        seen.add(server_name)
        override = spec.tools.get(server_name)
        if override is not None and not override.expose:
            continue
        name = spec.tool_name_prefix + server_name
        if name in follow_tools:
            refusals.append(
                f"{server.source}: tool {server_name!r} is left out: {name!r} is the name of a handoff follow "
                "tool, which hosts without the tasks extension follow tasks with (set spec.toolNamePrefix)"
            )
            continue
        try:
            input_schema = _check_schema(listed.get("inputSchema"), "inputSchema")
            output = listed.get("outputSchema")
            output_schema = _check_schema(output, "outputSchema") if output is not None else None
            scopes = override.required_scopes if override and override.required_scopes is not None else []
            capabilities = (
                override.required_client_capabilities
                if override and override.required_client_capabilities is not None
                else {}
            )
            container: JsonObject = (
                spec.container.model_dump(by_alias=True, exclude_none=True, mode="json") if spec.container else {}
            )
            container["command"] = [*bridge_command]
            container["env"] = [
                *[item for item in container.get("env", []) if "valueFrom" in item],
                {"name": ENV_BRIDGE_SERVER, "value": target},
                {"name": ENV_BRIDGE_TOOL, "value": server_name},
            ]
            execution = _execution(spec, server_name, listed)
            container["env"].append(
                {"name": ENV_BRIDGE_IDEMPOTENT, "value": "true" if execution.get("idempotent") else "false"}
            )
            support = _task_support(listed)
            if support is not None:
                container["env"].append({"name": ENV_BRIDGE_TASK_SUPPORT, "value": support})
            container.pop("workingDir", None)
            description = listed.get("description")
            title = listed.get("title")
            document = {
                "apiVersion": "mcptasks.io/v1alpha1",
                "kind": "McpTool",
                "metadata": {"name": f"{server.name}-{server_name}"},
                "spec": {
                    "name": name,
                    "title": title if isinstance(title, str) else None,
                    "description": description if isinstance(description, str) and description else name,
                    "inputSchema": input_schema,
                    "outputSchema": output_schema,
                    "annotations": listed.get("annotations") if isinstance(listed.get("annotations"), dict) else None,
                    "execution": execution,
                    "requiredClientCapabilities": capabilities,
                    "requiredScopes": scopes,
                    "container": container,
                    "warm": spec.warm.model_dump(by_alias=True, exclude_none=True) if spec.warm else None,
                },
            }
            plain = parse_manifest(document, source=server.source, base_dir=server.base_dir)
            # `execution.taskSupport` is the server's own task support, which the bridge drives; ours is the
            # tool's `taskPolicy`, so the server's is not shown to our clients.
            wire = Tool.model_validate({**{k: v for k, v in listed.items() if k != "execution"}, "name": name})
        except (ValueError, InvalidToolManifest) as exc:
            refusals.append(f"{server.source}: tool {server_name!r} is left out: {exc}")
            continue
        specs.append(
            ServerToolSpec(
                manifest=plain.manifest,
                tool=wire,
                source=server.source,
                base_dir=server.base_dir,
                header_bindings=plain.header_bindings,
                server=server,
                server_tool_name=server_name,
                listed=dict(listed),
            )
        )
    for key in spec.tools:
        if key not in seen:
            refusals.append(f"{server.source}: spec.tools.{key} names a tool the server does not list")
    return specs, refusals
