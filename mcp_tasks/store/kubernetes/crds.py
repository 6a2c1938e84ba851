"""The CustomResourceDefinitions, generated from the models the code reads and writes.

`McpTask`'s schema comes from `resources.McpTaskSpec`/`McpTaskStatus`, `McpTool`'s from the manifest
model `tasks.tools.ToolManifestSpec`, so the CRDs cannot drift from the code: `crds/*.yaml` is this
module's output (`mcptasks crds --write charts/mcp-tasks-crds/templates/`, the templates of the CRD
chart), and a test fails when the committed files differ. Every CRD carries `helm.sh/resource-policy:
keep`: uninstalling the CRD chart never deletes the definitions, and with them every McpTask and McpTool.
Printer columns, short names, categories and CEL rules are declared here, next to the schema.

Conversion from the pydantic JSON Schema to a Kubernetes *structural* schema: `$ref`s are inlined,
`anyOf [X, null]` becomes `X` (nulls are never written), free-form JSON objects (tool arguments,
results, input requests, JSON Schemas) become `x-kubernetes-preserve-unknown-fields: true`,
`exclusiveMinimum: n` becomes OpenAPI v3.0's `minimum: n, exclusiveMinimum: true`, titles are dropped.
"""

from __future__ import annotations

import copy
from typing import Any, Final

import yaml
from pydantic import BaseModel

from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.store.kubernetes.resources import (
    GROUP,
    SERVER_KIND,
    SERVER_PLURAL,
    TASK_KIND,
    TASK_PLURAL,
    TOOL_KIND,
    TOOL_PLURAL,
    VERSION,
    McpServerStatus,
    McpTaskSpec,
    McpTaskStatus,
    McpToolStatus,
)
from mcp_tasks.tasks import pod_shape
from mcp_tasks.tasks.servers import ServerManifestSpec
from mcp_tasks.tasks.tools import ToolManifestSpec

CATEGORY: Final = "mcp"
CRD_CHART_TEMPLATES: Final = "charts/mcp-tasks-crds/templates/"
CRD_LABELS: Final = {"app.kubernetes.io/part-of": "mcp-tasks"}
CRD_ANNOTATIONS: Final = {"helm.sh/resource-policy": "keep"}
_KEPT_KEYWORDS: Final = frozenset(
    {
        "type",
        "description",
        "default",
        "enum",
        "pattern",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "maxProperties",
        "format",
    }
)


def structural_schema(model: type[BaseModel]) -> JsonObject:
    """The OpenAPI v3 structural schema of `model`, as it is serialized (by alias)."""
    raw = model.model_json_schema(by_alias=True, mode="serialization")
    definitions = raw.get("$defs", {})
    return _convert(raw, definitions)


def _convert(node: JsonObject, definitions: JsonObject) -> JsonObject:
    if node.get("x-kubernetes-int-or-string"):  # a quantity: integer or string, as Kubernetes' own CRDs say
        kept = {k: copy.deepcopy(v) for k, v in node.items() if k in ("anyOf", "pattern", "maxLength", "description")}
        return {**kept, "x-kubernetes-int-or-string": True}
    if "$ref" in node:
        target = definitions[str(node["$ref"]).rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _convert(merged, definitions)
    if "anyOf" in node:
        choices = [c for c in node["anyOf"] if c.get("type") != "null"]
        if len(choices) != 1:
            raise ValueError(f"cannot express anyOf {node['anyOf']} in a structural schema")
        extra = {k: v for k, v in node.items() if k not in ("anyOf", "default") or (k == "default" and v is not None)}
        return _convert({**choices[0], **extra}, definitions)
    out: dict[str, Any] = {k: copy.deepcopy(v) for k, v in node.items() if k in _KEPT_KEYWORDS}
    if "description" in out:
        out["description"] = " ".join(str(out["description"]).split())
    if out.get("default", 0) is None:
        del out["default"]
    if "exclusiveMinimum" in node:
        out["minimum"] = node["exclusiveMinimum"]
        out["exclusiveMinimum"] = True
    if "const" in node:
        out["enum"] = [node["const"]]
    if node.get("type") == "object":
        properties: JsonObject = node.get("properties") or {}
        additional = node.get("additionalProperties")
        if properties:
            out["properties"] = {name: _convert(sub, definitions) for name, sub in properties.items()}
            if node.get("required"):
                out["required"] = list(node["required"])
        elif isinstance(additional, dict):
            out["additionalProperties"] = _convert(additional, definitions)
        else:
            out["x-kubernetes-preserve-unknown-fields"] = True
    if node.get("type") == "array" and "items" in node:
        out["items"] = _convert(node["items"], definitions)
    return out


def _at(schema: JsonObject, *path: str) -> dict[str, Any]:
    node: dict[str, Any] = schema
    for name in path:
        node = node["properties"][name]
    return node


def _column(name: str, path: str, kind: str = "string", priority: int = 0, description: str = "") -> JsonObject:
    column: dict[str, Any] = {"name": name, "type": kind, "jsonPath": path}
    if priority:
        column["priority"] = priority
    if description:
        column["description"] = description
    return column


def _definition(
    kind: str, plural: str, short_names: list[str], schema: JsonObject, columns: list[JsonObject], status: bool
) -> JsonObject:
    version: dict[str, Any] = {
        "name": VERSION,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": schema},
        "additionalPrinterColumns": columns,
    }
    if status:
        version["subresources"] = {"status": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}", "labels": dict(CRD_LABELS), "annotations": dict(CRD_ANNOTATIONS)},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short_names,
                "categories": [CATEGORY],
            },
            "versions": [version],
        },
    }


def _root(description: str, spec: JsonObject, status: JsonObject | None) -> JsonObject:
    properties: dict[str, Any] = {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": spec,
    }
    if status is not None:
        properties["status"] = status
    return {"type": "object", "description": description, "required": ["spec"], "properties": properties}


def mcptask_crd() -> JsonObject:
    """The McpTask CRD: one task; `spec` = client intent, `status` (subresource) = what the executor saw."""
    spec = structural_schema(McpTaskSpec)
    spec["description"] = "What the client asked for; written by the gateway. Fields fixed at creation are immutable."
    for name in (
        "owner",
        "tool",
        "arguments",
        "argumentsRef",
        "createdAt",
        "pollIntervalMs",
        "preInputResponses",
        "clientCapabilities",
        "traceparent",
    ):
        _at(spec, name)["x-kubernetes-validations"] = [{"rule": "self == oldSelf", "message": f"{name} is immutable"}]
    spec["x-kubernetes-validations"] = [
        {"rule": "!oldSelf.cancelRequested || self.cancelRequested", "message": "a cancel request cannot be withdrawn"},
        {"rule": "has(self.argumentsRef) == has(oldSelf.argumentsRef)", "message": "argumentsRef is immutable"},
    ]
    _at(spec, "inputResponses")["maxProperties"] = 256
    _at(spec, "inputResponses")["x-kubernetes-validations"] = [
        {
            "rule": "oldSelf.all(k, k in self && self[k] == oldSelf[k])",
            "message": "an answer cannot be changed or removed",
        }
    ]
    status = structural_schema(McpTaskStatus)
    status["description"] = "What the executor observed; written only through the status subresource."
    status["default"] = {"taskStatus": "working"}  # a fresh task reads (and prints) as working
    for name in ("attempt", "inputWaitMs"):  # left out while 0 (mapping.dump); a default would store them anyway
        del _at(status, name)["default"]
    _at(status, "inputRequests")["maxProperties"] = 256
    _at(status, "issuedInputKeys")["maxItems"] = 4096
    _at(status, "issuedInputKeys")["items"]["maxLength"] = 128
    conditions = _at(status, "conditions")  # API conventions: a map keyed by type, for server-side apply
    conditions["x-kubernetes-list-type"] = "map"
    conditions["x-kubernetes-list-map-keys"] = ["type"]
    conditions["maxItems"] = 8
    status["x-kubernetes-validations"] = [
        {
            "rule": "!has(oldSelf.taskStatus) || !(oldSelf.taskStatus in ['completed', 'failed', 'cancelled']) "
            "|| self.taskStatus == oldSelf.taskStatus",
            "message": "a finished task's taskStatus never changes (SEP-2663: terminal states are final)",
        },
    ]
    schema = _root(
        "A long-running MCP tool call (io.modelcontextprotocol/tasks); the name is the taskId.", spec, status
    )
    columns = [
        _column("Status", ".status.taskStatus", description="SEP-2663 task status"),
        _column("Tool", ".spec.tool"),
        _column("Tenant", ".spec.owner.tenant"),
        _column("ToolError", ".status.result.isError", kind="boolean", description="completed with isError: true"),
        _column("Message", ".status.statusMessage", description="statusMessage"),
        _column("Age", ".metadata.creationTimestamp", kind="date"),
        _column("Subject", ".spec.owner.subject", priority=1),
        _column("Issuer", ".spec.owner.issuer", priority=1, description="who vouched for the owner"),
        _column("Cancel", ".spec.cancelRequested", kind="boolean", priority=1, description="cancel requested"),
    ]
    return _definition(TASK_KIND, TASK_PLURAL, ["mcpt"], schema, columns, status=True)


def mcptool_crd() -> JsonObject:
    """The McpTool CRD: a tool declared as a container image, listed by `tools/list`."""
    spec = structural_schema(ToolManifestSpec)
    spec["description"] = "The MCP Tool fields plus how to run it (docs/tool-runtime.md)."
    _at(spec, "execution")["default"] = {}
    container = _at(spec, "container")
    container["required"] = sorted({*container.get("required", []), "image"})  # a Job needs an image
    # MCP 2026-07-28 Tool: inputSchema is a JSON Schema object with "type": "object" at its root.
    _at(spec, "inputSchema").update(
        {"required": ["type"], "properties": {"type": {"type": "string", "enum": ["object"]}}}
    )
    _pod_shape_rules(container)
    status = structural_schema(McpToolStatus)
    status["description"] = "Whether the gateways serve this tool, and why not; written by the operator."
    tool_conditions = _at(status, "conditions")
    tool_conditions["x-kubernetes-list-type"] = "map"
    tool_conditions["x-kubernetes-list-map-keys"] = ["type"]
    tool_conditions["maxItems"] = 8
    schema = _root(
        "A tool that MCP clients may call; runs as a Job of `spec.container.image`, or on warm workers (`spec.warm`).",
        spec,
        status,
    )
    columns = [
        _column("Tool", ".spec.name"),
        _column("Valid", '.status.conditions[?(@.type=="Valid")].status', description="served by the gateways"),
        _column("Image", ".spec.container.image"),
        _column("Policy", ".spec.execution.taskPolicy", description="taskPolicy: never|optional|required"),
        _column("Idempotent", ".spec.execution.idempotent", kind="boolean", priority=1),
        _column("Age", ".metadata.creationTimestamp", kind="date"),
    ]
    return _definition(TOOL_KIND, TOOL_PLURAL, ["mcptl"], schema, columns, status=True)


def mcpserver_crd() -> JsonObject:
    """The McpServer CRD: an existing MCP server (unmodified image) whose listed tools become task tools."""
    spec = structural_schema(ServerManifestSpec)
    spec["description"] = "An MCP server whose tools are served as durable task tools (docs/mcp-servers.md)."
    container = _at(spec, "container")
    container["required"] = sorted({*container.get("required", []), "image"})  # a pod needs an image
    _pod_shape_rules(container)
    spec["required"] = sorted({*spec.get("required", []), "container"})  # `http.url` is embedded only
    spec["x-kubernetes-validations"] = [
        *_rule(
            "self.transport != 'streamable-http' || has(self.http)",
            "transport streamable-http needs spec.http ({port, path})",
        ),
        *_rule("self.transport != 'stdio' || !has(self.http)", "spec.http is for transport streamable-http only"),
        *_rule("!has(self.http) || !has(self.http.url)", "spec.http.url is for embedded servers only"),
    ]
    status = structural_schema(McpServerStatus)
    status["description"] = "What discovery found and whether the gateways serve it; written by the operator."
    server_conditions = _at(status, "conditions")
    server_conditions["x-kubernetes-list-type"] = "map"
    server_conditions["x-kubernetes-list-map-keys"] = ["type"]
    server_conditions["maxItems"] = 8
    schema = _root(
        "An MCP server (stdio or Streamable HTTP) run from `spec.container.image`, unmodified; each tool it "
        "lists is a task tool, run per call as a Job with the server beside its bridge.",
        spec,
        status,
    )
    columns = [
        _column("Transport", ".spec.transport"),
        _column("Tools", ".status.toolCount", kind="integer", description="tools the gateways serve"),
        _column("Ready", '.status.conditions[?(@.type=="Ready")].status', description="every exposed tool served"),
        _column("Discovered", '.status.conditions[?(@.type=="Discovered")].status', priority=1),
        _column("Server", ".status.serverInfo.name", priority=1, description="serverInfo.name"),
        _column("Protocol", ".status.protocolVersion", priority=1, description="the MCP revision it speaks"),
        _column("Image", ".spec.container.image", priority=1),
        _column("Age", ".metadata.creationTimestamp", kind="date"),
    ]
    return _definition(SERVER_KIND, SERVER_PLURAL, ["mcps"], schema, columns, status=True)


def _rule(rule: str, message: str) -> list[JsonObject]:
    return [{"rule": rule, "message": message}]


def _pod_shape_rules(container: dict[str, Any]) -> None:
    """The pod-shape rules of `tasks.pod_shape` as CEL on `spec.container`, so `kubectl apply` refuses what
    the operator would: one source per env entry and volume, no name or path of the operator's own, mounts
    of declared volumes, requests within limits. Unknown keys (`hostPath`, `securityContext`) are not in
    the schema: refused under `kubectl apply`'s strict field validation, pruned otherwise.
    """
    env = _at(container, "env")["items"]
    env["x-kubernetes-validations"] = _rule(
        "has(self.value) != has(self.valueFrom)", "env: give exactly one of value and valueFrom"
    )
    _at(env, "valueFrom")["x-kubernetes-validations"] = _rule(
        "[has(self.secretKeyRef), has(self.configMapKeyRef), has(self.fieldRef)].filter(x, x).size() == 1",
        "valueFrom: give exactly one of secretKeyRef, configMapKeyRef, fieldRef",
    )
    _at(container, "envFrom")["items"]["x-kubernetes-validations"] = _rule(
        "has(self.secretRef) != has(self.configMapRef)", "envFrom: give exactly one of secretRef and configMapRef"
    )
    volumes = _at(container, "volumes")
    volumes["x-kubernetes-list-type"] = "map"
    volumes["x-kubernetes-list-map-keys"] = ["name"]
    reserved = ", ".join(f"'{name}'" for name in sorted(pod_shape.RESERVED_VOLUME_NAMES))
    volumes["items"]["x-kubernetes-validations"] = [
        *_rule(
            "[has(self.configMap), has(self.secret), has(self.persistentVolumeClaim)].filter(x, x).size() == 1",
            "volumes: each needs exactly one of configMap, secret, persistentVolumeClaim (no other kind)",
        ),
        *_rule(
            f"!(self.name in [{reserved}]) && !self.name.startsWith('{pod_shape.RESERVED_VOLUME_PREFIX}')",
            "volumes: this name is the operator's own; choose another",
        ),
    ]
    mounts = _at(container, "volumeMounts")
    mounts["x-kubernetes-list-type"] = "map"
    mounts["x-kubernetes-list-map-keys"] = ["mountPath"]
    ours = " || ".join(
        f"self.mountPath == '{path}' || self.mountPath.startsWith('{path}/')" for path in pod_shape.RESERVED_MOUNT_PATHS
    )
    mounts["items"]["x-kubernetes-validations"] = _rule(
        f"!({ours})", "volumeMounts: this mountPath is where the operator mounts its own volumes"
    )
    resources = _at(container, "resources")
    resources["x-kubernetes-validations"] = _rule(
        "!has(self.requests) || !has(self.limits) || self.requests.all(k, !(k in self.limits) || "
        "quantity(string(self.requests[k])).compareTo(quantity(string(self.limits[k]))) <= 0)",
        "resources: a request may not exceed its limit",
    )
    container["x-kubernetes-validations"] = _rule(
        "!has(self.volumeMounts) || "
        "self.volumeMounts.all(m, has(self.volumes) && self.volumes.exists(v, v.name == m.name))",
        "volumeMounts: each must name one of volumes",
    )


def rendered() -> dict[str, str]:
    """File name → YAML text of every CRD the project ships (the templates of `charts/mcp-tasks-crds`)."""
    header = f"# Generated by `mcptasks crds --write {CRD_CHART_TEMPLATES}` from mcp_tasks/store/kubernetes.\n"

    def text(*documents: JsonObject) -> str:
        return header + "---\n".join(yaml.safe_dump(d, sort_keys=False, width=120) for d in documents)

    return {
        "mcptasks.yaml": text(mcptask_crd()),
        "mcptools.yaml": text(mcptool_crd()),
        "mcpservers.yaml": text(mcpserver_crd()),
    }
