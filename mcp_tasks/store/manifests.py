"""`FileToolCatalog`: the embedded default's tool catalog, read from `McpTool` and `McpServer` YAML in folders.

Every `*.yaml`/`*.yml` file in the given folders (one level deep) may hold one or more McpTool or
McpServer documents. Tools are listed in a deterministic order (MCP 2026-07-28 `tools/list`): folders as
given, files sorted by name, documents in file order; then each McpServer's discovered tools, in the
servers' declaration order and the server's listing order (`discover_servers`, at start-up).
Loaded once at start-up; a broken manifest stops start-up with a message that names the file.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path
from typing import Final

import yaml

from mcp_tasks import aio
from mcp_tasks.store import server_discovery
from mcp_tasks.tasks import pod_shape, servers
from mcp_tasks.tasks.errors import InvalidToolManifest
from mcp_tasks.tasks.tools import ToolSpec, parse_manifest

logger = logging.getLogger("mcp_tasks.store.manifests")


BRIDGE_COMMAND: Final = ("python", "-m", servers.BRIDGE_MODULE)
"""The command of every McpServer tool, embedded (`python`: the runner's own interpreter)."""


def _documents(path: Path) -> list[object]:
    try:
        return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc is not None]
    except yaml.YAMLError as exc:
        raise InvalidToolManifest(f"{path}: not valid YAML: {exc}") from exc


def load_manifest_file(path: Path) -> list[ToolSpec]:
    """Parse every McpTool document in one YAML file (McpServer documents are skipped: `load_server_file`).

    Raises:
        InvalidToolManifest: the YAML does not parse or a document is not a valid McpTool.
    """
    base_dir = str(path.parent.resolve())
    return [
        parse_manifest(doc, source=str(path), base_dir=base_dir)
        for doc in _documents(path)
        if not servers.is_server_document(doc)
    ]


def load_server_file(path: Path) -> list[servers.ServerSpec]:
    """Parse every McpServer document in one YAML file.

    Raises:
        InvalidToolManifest: the YAML does not parse or an McpServer document is not valid.
    """
    base_dir = str(path.parent.resolve())
    return [
        servers.parse_server_manifest(doc, source=str(path), base_dir=base_dir)
        for doc in _documents(path)
        if servers.is_server_document(doc)
    ]


class FileToolCatalog:
    """A `ToolCatalog` over McpTool manifest files.

    Args:
        folders: folders to scan for `*.yaml`/`*.yml` manifests.
        follow_tools: the handoff follow tools' names (`GatewaySettings.follow_tool_names()`), which no
            McpServer's tool may take (an McpTool may: a catalog tool wins, docs/handoff.md).

    Raises:
        InvalidToolManifest: a manifest is invalid, a folder is missing, or two manifests declare one tool name.
    """

    def __init__(self, folders: Iterable[Path], follow_tools: Collection[str] = servers.DEFAULT_FOLLOW_TOOLS) -> None:
        self._follow_tools = tuple(follow_tools)
        tools: dict[str, ToolSpec] = {}
        self.servers: list[servers.ServerSpec] = []
        """The McpServers declared, in declaration order; their tools join at `discover_servers`."""
        for folder in folders:
            if not folder.is_dir():
                raise InvalidToolManifest(f"{folder}: tool folder does not exist (check --tools)")
            for path in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
                self.servers.extend(load_server_file(path))
                for spec in load_manifest_file(path):
                    if spec.name in tools:
                        raise InvalidToolManifest(
                            f"{path}: tool {spec.name!r} is already declared in {tools[spec.name].source}"
                        )
                    tools[spec.name] = spec
                    ignored = pod_shape.ignored_locally(spec.manifest.container)
                    if ignored:
                        logger.warning(
                            "tool %s: the embedded runner ignores these Kubernetes settings of spec.container: %s "
                            "(it applies command, workingDir, plain env values and resources.limits.memory)",
                            spec.name,
                            ", ".join(ignored),
                        )
        self._file_tools = dict(tools)
        self._server_tools: dict[str, tuple[ToolSpec, ...]] = {}
        self._discovered_at: dict[str, float] = {}
        self._built: dict[str, tuple[str, tuple[servers.ServerToolSpec, ...], tuple[str, ...]]] = {}
        """Server name → (digest of the listing, its specs, its refusals): an unchanged listing is not rebuilt."""
        self._tools = tools
        logger.info("loaded %d tools", len(self._tools))

    async def discover_servers(self) -> list[str]:
        """Discover every McpServer's tools (`server_discovery.discover`, all at once) and add them.

        A server that cannot be discovered is logged and left out (its tools come at a later resync, if it
        has one, or the next start): one broken server does not stop the others. A listed tool left out by
        `servers.tool_specs` is logged with its reason. Returns those messages.

        Raises:
            InvalidToolManifest: a discovered tool's name (with the server's prefix) is already another
                tool's; the message names both.
        """
        # All at once: each is mostly waiting for a process to start (the listing order does not depend on it).
        found = await asyncio.gather(*(self._discover(s, starting=True) for s in self.servers), return_exceptions=True)
        problems: list[str] = []
        for outcome in found:
            if isinstance(outcome, BaseException):
                raise outcome
            problems.extend(outcome)
        return problems

    async def resync_servers(self) -> None:
        """Discover each McpServer again every `spec.resyncIntervalSeconds` (0: never), until cancelled.

        Its tools are replaced by what it lists now: new ones are listed and callable, those it no longer
        lists go (a task of a tool that went fails at its next claim, as for a removed McpTool). A clash with
        another tool, or a failed discovery, keeps the tools it had. Returns at once when no server resyncs.

        Raises:
            asyncio.CancelledError: when cancelled (the only way out once started).
        """
        intervals = [s.manifest.resync_interval_seconds for s in self.servers if s.manifest.resync_interval_seconds]
        if intervals:
            await aio.every(min(intervals), self._resync_due, "McpServer resync", log=logger)

    async def _resync_due(self) -> None:
        now = time.monotonic()
        for server in self.servers:
            interval = server.manifest.resync_interval_seconds
            if interval and now >= self._discovered_at.get(server.name, 0.0) + interval:
                await self._discover(server, starting=False)

    async def _discover(self, server: servers.ServerSpec, *, starting: bool) -> list[str]:
        """Discover one server and put its tools in place of those it had; the problems, as messages.

        Raises:
            InvalidToolManifest: `starting` and a tool clashes (otherwise the clash is logged and the
                server keeps its previous tools).
        """
        self._discovered_at[server.name] = time.monotonic()
        try:
            found = await server_discovery.discover(server)
        except server_discovery.DiscoveryFailed as exc:
            logger.error("McpServer %s is left out: %s", server.name, exc)
            return [str(exc)]
        too_many = servers.too_many_tools(server, found)
        if too_many is not None:
            logger.error("McpServer %s: %s; it keeps the tools it had", server.name, too_many)
            return [too_many]
        digest = await asyncio.to_thread(servers.listing_digest, found)
        built = self._built.get(server.name)
        if built is not None and built[0] == digest:
            specs, refusals = list(built[1]), list(built[2])
        else:
            # ~1 ms of CPU a tool (its schemas' metaschema checks): off the event loop, so a large listing
            # does not hold up other requests.
            specs, refusals = await asyncio.to_thread(
                servers.tool_specs, server, found, BRIDGE_COMMAND, self._follow_tools
            )
            self._built[server.name] = (digest, tuple(specs), tuple(refusals))
            for refusal in refusals:
                logger.warning("%s", refusal)
        others = {
            name: spec
            for name, spec in self._tools.items()
            if not (isinstance(spec, servers.ServerToolSpec) and spec.server.name == server.name)
        }
        for spec in specs:
            if spec.name in others:
                clash = (
                    f"{server.source}: tool {spec.name!r} of McpServer {server.name!r} clashes with tool "
                    f"{spec.name!r} declared in {others[spec.name].source} (set spec.toolNamePrefix)"
                )
                if starting:
                    raise InvalidToolManifest(clash)
                logger.error("%s; the server keeps the tools it had", clash)
                return [*refusals, clash]
        before = self._server_tools.get(server.name, ())
        self._server_tools[server.name] = tuple(specs)
        self._tools = self._ordered()
        if starting or [spec.tool for spec in before] != [spec.tool for spec in specs]:
            logger.info(
                "McpServer %s (%s, protocol %s): %d tools",
                server.name,
                found.server_info.get("name", "?"),
                found.protocol_version,
                len(specs),
            )
        return refusals

    def _ordered(self) -> dict[str, ToolSpec]:
        """The McpTools in declaration order, then each McpServer's tools in server and listing order."""
        tools = dict(self._file_tools)
        for server in self.servers:
            tools.update((spec.name, spec) for spec in self._server_tools.get(server.name, ()))
        return tools

    def list_tools(self) -> Sequence[ToolSpec]:
        """All tools, in declaration order (folders, then sorted files, then documents)."""
        return list(self._tools.values())

    def get_tool(self, name: str) -> ToolSpec | None:
        """The tool named `name`, or `None`."""
        return self._tools.get(name)
