"""The `McpTask` custom resource: its API coordinates and the shape of `spec` and `status`.

These pydantic models are the single source of the CRD schema (`crds.py` generates `crds/*.yaml`
from them; a test fails when the committed files drift). Client intent lives in `spec` (written by
the gateway), what the executor observed in `status` (written only through the status subresource),
as ARCHITECTURE.md §The task record asks. Field names follow SEP-2663 (`ttlMs`, `inputRequests`, ...).
"""

from __future__ import annotations

import hashlib
import re
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.protocol.models import TaskStatus

GROUP: Final = "mcptasks.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
TASK_KIND: Final = "McpTask"
TASK_PLURAL: Final = "mcptasks"
TOOL_KIND: Final = "McpTool"
TOOL_PLURAL: Final = "mcptools"
SERVER_KIND: Final = "McpServer"
SERVER_PLURAL: Final = "mcpservers"

TENANT_LABEL: Final = f"{GROUP}/tenant"
"""Label carrying the owner's tenant (or `sha256-<16 hex>` when the tenant is not a valid label value)."""
TOOL_LABEL: Final = f"{GROUP}/tool"
"""Label carrying the tool name (hashed like the tenant when it is not a valid label value)."""
MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "mcp-tasks"

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def label_value(text: str) -> str:
    """`text` when it is a valid label value (≤ 63 chars, alphanumeric ends), else `sha256-<16 hex>`."""
    if len(text) <= 63 and _LABEL_VALUE.match(text):
        return text
    return "sha256-" + hashlib.sha256(text.encode()).hexdigest()[:16]


class _Resource(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, use_attribute_docstrings=True)


class _Stored(_Resource):
    """A part of an McpTask: a field a newer version wrote and this one does not know is kept, not refused
    (`model_extra`), and written back with the part (a rolling upgrade or rollback never loses it).
    """

    model_config = ConfigDict(extra="allow")


class TaskOwner(_Stored):
    """`spec.owner`: the authenticated principal that created the task (immutable)."""

    tenant: str = Field(min_length=1)
    subject: str = Field(min_length=1)
    issuer: str | None = Field(None, max_length=2048)
    """Who vouched for the principal: an OIDC issuer URL, `static`, `kubernetes` or `local`
    (`tasks.owner`). Absent on tasks created before owners named their issuer: read as the gateway's
    `legacy_owner_issuer` (docs/security.md, Owners)."""


class ArgumentsArtifact(_Stored):
    """`spec.argumentsRef`: the task's arguments are too large to keep here and are its artifact `name`
    (compact JSON of `sizeBytes` bytes with hex SHA-256 `sha256`); `spec.arguments` is then empty.
    """

    name: str = Field(min_length=1, max_length=128)
    size_bytes: int = Field(alias="sizeBytes", ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


TRACEPARENT_PATTERN: Final = r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$"
"""A W3C `traceparent` (trace-context §3.2)."""


class McpTaskSpec(_Stored):
    """`spec` of an McpTask: what the client asked for. Written by the gateway only.

    Times are ISO 8601 UTC strings with millisecond precision (`2026-11-30T01:02:03.456Z`).
    `inputResponses` holds every answer ever given (key → `ElicitResult`/... object); it only grows,
    and a key the executor still lists in `status.inputRequests` is pending-with-answer.
    """

    owner: TaskOwner
    tool: str = Field(min_length=1)
    arguments: JsonObject = Field(default_factory=dict)
    arguments_ref: ArgumentsArtifact | None = Field(None, alias="argumentsRef")
    """Set when the arguments are an artifact of the task (above the gateway's inline cap); `arguments` is empty."""
    created_at: str = Field(alias="createdAt")
    ttl_ms: int = Field(alias="ttlMs", gt=0)
    """Retention requested at creation, in ms from `createdAt` (the executor may raise it in `status.ttlMs`)."""
    poll_interval_ms: int = Field(alias="pollIntervalMs", gt=0)
    traceparent: str | None = Field(None, max_length=55, pattern=TRACEPARENT_PATTERN)
    """W3C trace context of the creating `tools/call` (optional tracing; docs/operations.md §Tracing)."""
    pre_input_responses: dict[str, JsonObject] = Field(default_factory=dict, alias="preInputResponses")
    client_capabilities: JsonObject | None = Field(None, alias="clientCapabilities")
    """The creating request's input capabilities (`elicitation`, `sampling`, `roots`); fixed at creation."""
    """Answers to the tool's `inputBeforeTask` requests, gathered before the task existed."""
    input_responses: dict[str, JsonObject] = Field(default_factory=dict, alias="inputResponses")
    last_answered_at: str | None = Field(None, alias="lastAnsweredAt")
    """When `tasks/update` last added an answer."""
    cancel_requested: bool = Field(False, alias="cancelRequested")
    cancel_requested_at: str | None = Field(None, alias="cancelRequestedAt")
    cancel_requested_by: str | None = Field(None, alias="cancelRequestedBy")
    watched_until: str | None = Field(None, alias="watchedUntil", json_schema_extra={"format": "date-time"})
    """A hidden task's watch (renewed by the gateway whose call waits for it); past it the operator cancels."""


class LeaseCall(_Stored):
    """`status.lease.call`: the warm call that runs the leased attempt, so another replica can re-attach to it."""

    execution_id: str = Field(alias="executionId", max_length=128)
    endpoint: str = Field(max_length=300)
    """`host:port` of the warm pod running the call."""


class TaskLease(_Stored):
    """`status.lease`: an executor's claim on the task (the operator's warm-task runner)."""

    holder: str
    expires_at: str = Field(alias="expiresAt")
    call: LeaseCall | None = None


class TaskCondition(_Stored):
    """One of `status.conditions` (Kubernetes API conventions; types and reasons in `conditions.py`)."""

    type: str = Field(pattern=r"^[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?$", max_length=316)
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$", min_length=1, max_length=1024)
    message: str | None = Field(None, max_length=32768)
    """Human-readable detail (an McpTool names the invalid field); McpTasks omit it (`conditions.py`)."""
    last_transition_time: str = Field(alias="lastTransitionTime", json_schema_extra={"format": "date-time"})
    observed_generation: int | None = Field(None, alias="observedGeneration", ge=0)
    """The object's `metadata.generation` when the condition was written."""


class WarmStatus(_Resource):
    """`status.warm` of an McpTool with `spec.warm`: where its warm workers take calls, written by the operator."""

    endpoints: list[str] = Field(default_factory=list, max_length=256)
    """`podIP:port` of each ready warm worker; the gateways send synchronous calls straight to them."""
    ready_workers: int = Field(0, alias="readyWorkers", ge=0)
    """How many warm workers are ready (the length of `endpoints`)."""
    service: str | None = None
    """The Service in front of them, `name.namespace.svc:port`, for other clients."""


class McpToolStatus(_Resource):
    """`status` of an McpTool, written by the operator: whether the gateways serve it, and why not.

    One condition, `Valid`: `True` (reason `Valid`) when the manifest parses and its tool name is its
    own; `False` with reason `InvalidManifest` (the message names the field) or `DuplicateName` (an
    older McpTool declares the same tool name). A warm tool also gets `warm` (`WarmStatus`).
    """

    conditions: list[TaskCondition] = Field(default_factory=list)
    warm: WarmStatus | None = None


class McpServerStatus(_Stored):
    """`status` of an McpServer, written by the operator from the server's own discovery (docs/mcp-servers.md).

    The catalogs serve the tools listed here (`tools`, each `Tool` verbatim as the server sent it), so a
    gateway needs no call to the server to answer `tools/list`. Conditions: `Discovered` (`True`, reason
    `Discovered`, once discovery of the current `metadata.generation` succeeded; `False` with reason
    `DiscoveryFailed` or `Pending`) and `Ready` (`True` when every exposed tool is served; `False` with
    reason `NotDiscovered`, `ToolsRefused` (a name clash or an unusable schema, the message names both
    sides) or `InvalidManifest`). Unknown fields a newer version wrote are kept.
    """

    protocol_version: str | None = Field(None, alias="protocolVersion", max_length=64)
    """The MCP revision the server speaks (its `initialize` answer, or the one chosen by `server/discover`)."""
    server_info: JsonObject | None = Field(None, alias="serverInfo")
    """The server's `Implementation` (`{name, version, title?, ...}`), verbatim."""
    capabilities: JsonObject | None = None
    """The server's declared capabilities, verbatim."""
    instructions: str | None = Field(None, max_length=65536)
    tools: list[JsonObject] = Field(default_factory=list, max_length=1024)
    """Every `Tool` of the server's (paginated) `tools/list`, verbatim, in listing order."""
    tool_count: int = Field(0, alias="toolCount", ge=0)
    """How many tools the gateways serve from this server (for `kubectl get mcpservers`)."""
    served_tools: list[str] = Field(default_factory=list, alias="servedTools", max_length=1024)
    """The tool names (with `toolNamePrefix`) the gateways serve from this server."""
    observed_generation: int | None = Field(None, alias="observedGeneration", ge=0)
    """The `metadata.generation` whose spec the tools above were discovered with."""
    discovered_at: str | None = Field(None, alias="discoveredAt", json_schema_extra={"format": "date-time"})
    """When the last successful discovery finished."""
    last_error: str | None = Field(None, alias="lastError", max_length=32768)
    """Why the last discovery failed (kept until one succeeds)."""
    conditions: list[TaskCondition] = Field(default_factory=list)
    warm: dict[str, WarmStatus] = Field(default_factory=dict, max_length=1024)
    """With `spec.warm`: tool name (with `toolNamePrefix`) → where its warm workers take calls (one pool per
    tool, written by the operator); the gateways send that tool's synchronous calls straight to them."""


class McpTaskStatus(_Stored):
    """`status` of an McpTask: what the executor observed. Written only through the status subresource.

    Absent until the executor first writes it; the CRD defaults `taskStatus` to `working` so a fresh
    task reads (and prints) as `working`. `inputRequests` maps each key still awaiting consumption to
    its `{method, params}` request; `issuedInputKeys` lists every key ever issued, so none is reused.
    """

    task_status: TaskStatus = Field(TaskStatus.WORKING, alias="taskStatus")
    """The SEP-2663 task status as the executor recorded it (one enum with the wire's, `TaskStatus`)."""
    status_message: str | None = Field(None, alias="statusMessage")
    progress: JsonObject | None = None
    """The tool's last numeric progress report `{progress, total?}`."""
    last_updated_at: str | None = Field(None, alias="lastUpdatedAt")
    ttl_ms: int | None = Field(None, alias="ttlMs", gt=0)
    """Current retention in ms from `createdAt`; raised while the task runs (SEP-2663: ttlMs may change)."""
    input_requests: dict[str, JsonObject] = Field(default_factory=dict, alias="inputRequests")
    issued_input_keys: list[str] = Field(default_factory=list, alias="issuedInputKeys")
    input_round_digest: str | None = Field(None, alias="inputRoundDigest", max_length=64)
    """Digest of the latest round of input requests and the worker's id for it, so a round sent again
    (its answer was lost) gets the same keys."""
    result: JsonObject | None = None
    """The inlined `CallToolResult` (bounded by the inline cap; larger results are artifact links)."""
    error: JsonObject | None = None
    """A JSON-RPC error object `{code, message, data?}` for `failed` tasks."""
    lease: TaskLease | None = None
    attempt: int = Field(0, ge=0)
    input_wait_ms: int = Field(0, alias="inputWaitMs", ge=0)
    """Time spent waiting for input so far, in ms (it does not count against `maxRunTimeSeconds`)."""
    input_required_since: str | None = Field(
        None, alias="inputRequiredSince", json_schema_extra={"format": "date-time"}
    )
    """When the current wait for input began."""
    conditions: list[TaskCondition] = Field(default_factory=list)
    """`Started`, `InputRequired` and `Finished` (store/kubernetes/conditions.py), one of each type; a
    finished task's `Finished` alone.
    """
