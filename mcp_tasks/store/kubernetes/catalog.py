"""`KubernetesToolCatalog`: the tools are the `McpTool` custom resources of one namespace, watched.

`tools/list` follows `kubectl apply` and `kubectl delete` within a watch round trip. A malformed
McpTool cannot stop a running gateway: it is left out and logged with the reason (the CRD schema
already rejects most mistakes at `kubectl apply`). Two McpTools declaring the same tool name: the
older one wins and the conflict is logged. Tools are listed sorted by name (a stable order for
`tools/list` pagination). `verdicts()` says, per McpTool, whether it is served and why not (the
operator writes it into the McpTool's `status.conditions`); `changed` is set after every rebuild.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Final

from kubernetes_asyncio.client import ApiClient

from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.store.kubernetes import client
from mcp_tasks.store.kubernetes.resources import SERVER_PLURAL, TOOL_PLURAL
from mcp_tasks.store.kubernetes.watch import Reflector
from mcp_tasks.tasks.errors import InvalidToolManifest
from mcp_tasks.tasks.servers import (
    BRIDGE_MODULE,
    DEFAULT_FOLLOW_TOOLS,
    Discovery,
    listing_digest,
    parse_server_manifest,
    tool_specs,
)
from mcp_tasks.tasks.tools import ToolSpec, parse_manifest

logger = logging.getLogger("mcp_tasks.store.kubernetes")

BRIDGE_COMMAND: Final = ("python", "-m", BRIDGE_MODULE)
"""argv of the bridge in the project's image (the per-call pod's `bridge` container, `operator/server_jobs.py`)."""


@dataclass(frozen=True, slots=True)
class ToolVerdict:
    """Whether one McpTool is served: `reason` is `Valid`, `InvalidManifest` or `DuplicateName`.

    `generation` is the McpTool's `metadata.generation` the verdict is about; `conditions` what its
    `status.conditions` hold now (to write only what changed).
    """

    valid: bool
    reason: str
    message: str
    generation: int
    conditions: list[JsonObject]


@dataclass(frozen=True, slots=True)
class ServerVerdict:
    """Whether one McpServer's tools are served.

    `discovered`: its status holds a discovery (`status.tools`) the catalog could read; `served` the tool
    names (with prefix) served from it; `refusals` a sentence per listed tool left out (a name clash names
    both declarations, a schema that is not one says why); `problem` why none can be served (an invalid
    manifest), else `None`.
    """

    discovered: bool
    served: tuple[str, ...]
    refusals: tuple[str, ...] = ()
    problem: str | None = None
    generation: int = 1
    status: JsonObject = field(default_factory=dict)


class _Servers:
    """The McpServers' local copy, fed by its own `Reflector`; every change rebuilds the catalog."""

    def __init__(self, catalog: KubernetesToolCatalog) -> None:
        self.catalog = catalog
        self.objects: dict[str, JsonObject] = {}
        self._listing: dict[str, JsonObject] = {}

    def listed_page(self, items: Sequence[JsonObject]) -> None:
        self._listing.update({str(item["metadata"]["name"]): item for item in items})

    def listed(self, names: set[str]) -> None:
        self.objects = {name: obj for name, obj in self._listing.items() if name in names}
        self._listing = {}
        self.catalog._rebuild()

    def apply_event(self, kind: str, obj: JsonObject) -> None:
        name = str(obj["metadata"]["name"])
        if kind == "DELETED":
            self.objects.pop(name, None)
        else:
            self.objects[name] = obj
        self.catalog._rebuild()


class KubernetesToolCatalog:
    """A `ToolCatalog` over the McpTools of `namespace`.

    Args:
        api_client: an open kubernetes_asyncio `ApiClient`.
        namespace: where the McpTools live (the gateway's namespace).
        watch_timeout_s: server-side timeout of one WATCH request, in seconds.
        follow_tools: the handoff follow tools' names (`GatewaySettings.follow_tool_names()`), which no
            McpServer's tool may take (an McpTool may: a catalog tool wins, docs/handoff.md).
    """

    def __init__(
        self,
        api_client: ApiClient,
        namespace: str,
        watch_timeout_s: int = 300,
        follow_tools: Collection[str] = DEFAULT_FOLLOW_TOOLS,
    ) -> None:
        self.namespace = namespace
        self._follow_tools = tuple(follow_tools)
        self._built: dict[str, tuple[str, tuple[ToolSpec, ...], tuple[str, ...]]] = {}
        """McpServer name → (digest of its spec and discovery, its specs, its refusals): a rebuild for another
        object's change does not check an unchanged server's listing again."""
        self._objects: dict[str, JsonObject] = {}
        self._listing: dict[str, JsonObject] = {}  # pages of a listing in progress
        self._tools: dict[str, ToolSpec] = {}
        self._sorted: list[ToolSpec] = []
        self._reported: set[str] = set()  # problems already logged (a relist must not repeat them)
        self._verdicts: dict[str, ToolVerdict] = {}
        self._served: dict[str, tuple[JsonObject, ToolSpec]] = {}
        self._endpoints: dict[str, tuple[str, ...]] = {}
        self.changed = asyncio.Event()
        self._listeners: list[asyncio.Event] = [self.changed]
        self.reflector = Reflector(
            api_client, self, plural=TOOL_PLURAL, namespace=namespace, watch_timeout_s=watch_timeout_s
        )
        self._servers = _Servers(self)
        self._server_verdicts: dict[str, ServerVerdict] = {}
        self.server_reflector: Reflector | None = Reflector(
            api_client, self._servers, plural=SERVER_PLURAL, namespace=namespace, watch_timeout_s=watch_timeout_s
        )

    async def open(self) -> None:
        """List the McpTools and McpServers and start watching them.

        An API server without the McpServer CRD (a CRD chart older than this version) serves McpTools
        alone, with a warning.

        Raises:
            client.ApiError: the McpTool CRD is not installed (404) or listing is forbidden (403).
            StoreUnavailable: the API server did not answer for the reflector's start-up deadline.
        """
        await self.reflector.start()
        if self.server_reflector is not None:
            try:
                await self.server_reflector.start()
            except client.NotFound:
                logger.warning("the McpServer CRD is not installed: MCP servers are not served (upgrade the CRD chart)")
                await self.server_reflector.aclose()
                self.server_reflector = None

    def not_ready_reason(self) -> str | None:
        """Why the copy may be stale (either reflector's `not_ready_reason`), or `None`."""
        servers = self.server_reflector.not_ready_reason() if self.server_reflector is not None else None
        return self.reflector.not_ready_reason() or servers

    async def aclose(self) -> None:
        """Stop watching."""
        await self.reflector.aclose()
        if self.server_reflector is not None:
            await self.server_reflector.aclose()

    def list_tools(self) -> Sequence[ToolSpec]:
        """All valid tools, sorted by tool name."""
        return self._sorted

    def get_tool(self, name: str) -> ToolSpec | None:
        """The tool named `name`, or `None`."""
        return self._tools.get(name)

    def verdicts(self) -> dict[str, ToolVerdict]:
        """McpTool object name → whether it is served and why not, as of the last rebuild."""
        return self._verdicts

    def served(self) -> dict[str, tuple[JsonObject, ToolSpec]]:
        """McpTool object name → (the object, its tool) for every McpTool that is served."""
        return self._served

    def server_verdicts(self) -> dict[str, ServerVerdict]:
        """McpServer object name → which of its tools are served and why the others are not."""
        return self._server_verdicts

    def servers(self) -> dict[str, JsonObject]:
        """McpServer object name → the object, as last seen (what discovery runs for)."""
        return dict(self._servers.objects)

    def warm_endpoints(self, tool: str) -> tuple[str, ...]:
        """`host:port` of each ready warm worker of tool `tool` (its McpTool's `status.warm.endpoints`, or its
        McpServer's `status.warm.<tool>.endpoints`).
        """
        return self._endpoints.get(tool, ())

    def subscribe(self) -> asyncio.Event:
        """A new event, set now and after every rebuild, for one more consumer than `changed`'s."""
        event = asyncio.Event()
        event.set()
        self._listeners.append(event)
        return event

    def listed_page(self, items: Sequence[JsonObject]) -> None:
        self._listing.update({str(item["metadata"]["name"]): item for item in items})

    def listed(self, names: set[str]) -> None:
        # a listing cut short (410 between pages) may have left pages behind: keep only this one's objects
        self._objects = {name: obj for name, obj in self._listing.items() if name in names}
        self._listing = {}
        self._rebuild()

    def apply_event(self, kind: str, obj: JsonObject) -> None:
        name = str(obj["metadata"]["name"])
        if kind == "DELETED":
            self._objects.pop(name, None)
        else:
            self._objects[name] = obj
        self._rebuild()

    def _report(self, problem: str) -> None:
        if problem not in self._reported:
            self._reported.add(problem)
            logger.warning("%s", problem)

    def _rebuild(self) -> None:
        tools: dict[str, ToolSpec] = {}
        verdicts: dict[str, ToolVerdict] = {}
        served: dict[str, tuple[JsonObject, ToolSpec]] = {}
        endpoints: dict[str, tuple[str, ...]] = {}
        oldest_first = sorted(
            self._objects.values(),
            key=lambda o: (str(o["metadata"].get("creationTimestamp", "")), str(o["metadata"]["name"])),
        )
        for obj in oldest_first:
            name = str(obj["metadata"]["name"])
            source = f"mcptool/{name} in namespace {self.namespace}"

            def verdict(valid: bool, reason: str, message: str, obj: JsonObject = obj) -> ToolVerdict:
                conditions = list((obj.get("status") or {}).get("conditions") or [])
                return ToolVerdict(valid, reason, message, int(obj["metadata"].get("generation") or 1), conditions)

            try:
                spec = parse_manifest(_manifest(obj), source=source)
            except InvalidToolManifest as exc:
                self._report(f"skipping {exc}")
                verdicts[name] = verdict(False, "InvalidManifest", str(exc))
                continue
            if spec.name in tools:
                other = tools[spec.name].source
                self._report(f"skipping {source}: tool {spec.name!r} is already declared by {other}")
                verdicts[name] = verdict(False, "DuplicateName", f"tool {spec.name!r} is already declared by {other}")
                continue
            tools[spec.name] = spec
            verdicts[name] = verdict(True, "Valid", f"served as tool {spec.name!r}")
            served[name] = (obj, spec)
            if spec.warm is not None:
                endpoints[spec.name] = _warm_endpoints((obj.get("status") or {}).get("warm"))
        self._server_verdicts = self._add_servers(tools, endpoints)
        self._tools = tools
        self._sorted = [tools[name] for name in sorted(tools)]
        self._verdicts = verdicts
        self._served = served
        self._endpoints = endpoints
        for listener in self._listeners:
            listener.set()

    def _add_servers(
        self, tools: dict[str, ToolSpec], endpoints: dict[str, tuple[str, ...]]
    ) -> dict[str, ServerVerdict]:
        """Add each McpServer's discovered tools to `tools` (oldest server first), and the ready warm workers of
        a warm server's tools to `endpoints`; the servers' verdicts.
        """
        verdicts: dict[str, ServerVerdict] = {}
        oldest_first = sorted(
            self._servers.objects.values(),
            key=lambda o: (str(o["metadata"].get("creationTimestamp", "")), str(o["metadata"]["name"])),
        )
        for obj in oldest_first:
            name = str(obj["metadata"]["name"])
            source = f"mcpserver/{name} in namespace {self.namespace}"
            generation = int(obj["metadata"].get("generation") or 1)
            status: JsonObject = obj.get("status") or {}
            try:
                server = parse_server_manifest(_manifest(obj), source=source)
            except InvalidToolManifest as exc:
                self._report(f"skipping {exc}")
                verdicts[name] = ServerVerdict(False, (), problem=str(exc), generation=generation, status=status)
                continue
            discovery = _discovery(status)
            if discovery is None:
                verdicts[name] = ServerVerdict(False, (), generation=generation, status=status)
                continue
            key = hashlib.sha256(
                json.dumps(obj.get("spec"), sort_keys=True, default=str).encode() + listing_digest(discovery).encode()
            ).hexdigest()
            built = self._built.get(name)
            if built is None or built[0] != key:
                # cost: ~1 ms of CPU a tool (at most MAX_SERVER_TOOLS), paid again only when the listing changes
                fresh, fresh_refusals = tool_specs(server, discovery, BRIDGE_COMMAND, self._follow_tools)
                built = (key, tuple(fresh), tuple(fresh_refusals))
                self._built[name] = built
            specs, refusals = list(built[1]), list(built[2])
            warm = status.get("warm")
            served: list[str] = []
            for spec in specs:
                if spec.name in tools:
                    refusals.append(
                        f"{source}: tool {spec.name!r} is refused: it is already declared by {tools[spec.name].source}"
                    )
                    continue
                tools[spec.name] = spec
                served.append(spec.name)
                if spec.warm is not None:
                    endpoints[spec.name] = _warm_endpoints(warm.get(spec.name) if isinstance(warm, dict) else None)
            for refusal in refusals:
                self._report(refusal)
            verdicts[name] = ServerVerdict(True, tuple(served), tuple(refusals), generation=generation, status=status)
        for gone in set(self._built) - set(self._servers.objects):
            del self._built[gone]
        return verdicts


def _discovery(status: JsonObject) -> Discovery | None:
    """What the operator's discovery wrote into an McpServer's status, or `None` before the first one."""
    tools = status.get("tools")
    info = status.get("serverInfo")
    if not isinstance(tools, list) or not isinstance(info, dict) or not status.get("protocolVersion"):
        return None
    capabilities = status.get("capabilities")
    instructions = status.get("instructions")
    return Discovery(
        protocol_version=str(status["protocolVersion"]),
        server_info=info,
        tools=tuple(tool for tool in tools if isinstance(tool, dict)),
        capabilities=capabilities if isinstance(capabilities, dict) else {},
        instructions=instructions if isinstance(instructions, str) else None,
    )


def _manifest(obj: JsonObject) -> JsonObject:
    """The parts of an McpTool object the manifest model reads (server-set fields dropped)."""
    return {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": {"name": obj["metadata"]["name"]},
        "spec": obj.get("spec"),
    }


def _warm_endpoints(warm: object) -> tuple[str, ...]:
    """The `host:port` strings of a `status.warm`'s `endpoints` (anything else there is ignored)."""
    listed = warm.get("endpoints") if isinstance(warm, dict) else None
    if not isinstance(listed, list):
        return ()
    return tuple(item for item in listed if isinstance(item, str) and ":" in item and len(item) < 300)
