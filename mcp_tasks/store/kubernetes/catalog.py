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
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from kubernetes_asyncio.client import ApiClient

from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.store.kubernetes.resources import TOOL_PLURAL
from mcp_tasks.store.kubernetes.watch import Reflector
from mcp_tasks.tasks.errors import InvalidToolManifest
from mcp_tasks.tasks.tools import ToolSpec, parse_manifest

logger = logging.getLogger("mcp_tasks.store.kubernetes")


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


class KubernetesToolCatalog:
    """A `ToolCatalog` over the McpTools of `namespace`.

    Args:
        api_client: an open kubernetes_asyncio `ApiClient`.
        namespace: where the McpTools live (the gateway's namespace).
        watch_timeout_s: server-side timeout of one WATCH request, in seconds.
    """

    def __init__(self, api_client: ApiClient, namespace: str, watch_timeout_s: int = 300) -> None:
        self.namespace = namespace
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

    async def open(self) -> None:
        """List the McpTools and start watching them.

        Raises:
            client.ApiError: the McpTool CRD is not installed (404) or listing is forbidden (403).
            StoreUnavailable: the API server did not answer for the reflector's start-up deadline.
        """
        await self.reflector.start()

    async def aclose(self) -> None:
        """Stop watching."""
        await self.reflector.aclose()

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

    def warm_endpoints(self, tool: str) -> tuple[str, ...]:
        """`host:port` of each ready warm worker of tool `tool` (its McpTool's `status.warm.endpoints`)."""
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
                endpoints[spec.name] = _warm_endpoints(obj)
        self._tools = tools
        self._sorted = [tools[name] for name in sorted(tools)]
        self._verdicts = verdicts
        self._served = served
        self._endpoints = endpoints
        for listener in self._listeners:
            listener.set()


def _manifest(obj: JsonObject) -> JsonObject:
    """The parts of an McpTool object the manifest model reads (server-set fields dropped)."""
    return {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": {"name": obj["metadata"]["name"]},
        "spec": obj.get("spec"),
    }


def _warm_endpoints(obj: JsonObject) -> tuple[str, ...]:
    """The `host:port` strings of `status.warm.endpoints` (anything else there is ignored)."""
    warm = (obj.get("status") or {}).get("warm") or {}
    listed = warm.get("endpoints") if isinstance(warm, dict) else None
    if not isinstance(listed, list):
        return ()
    return tuple(item for item in listed if isinstance(item, str) and ":" in item and len(item) < 300)
