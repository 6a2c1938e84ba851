"""`FileToolCatalog`: the embedded default's tool catalog, read from `McpTool` and `McpServer` YAML in folders.

Every `*.yaml`/`*.yml` file in the given folders (one level deep) may hold one or more McpTool or
McpServer documents. Tools are listed in a deterministic order (MCP 2026-07-28 `tools/list`): folders as
given, files sorted by name, documents in file order; then each McpServer's discovered tools, in the
servers' declaration order and the server's listing order (`discover_servers`, at start-up).
Loaded once at start-up; a broken manifest stops start-up with a message that names the file.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final

import yaml

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

    Raises:
        InvalidToolManifest: a manifest is invalid, a folder is missing, or two manifests declare one tool name.
    """

    def __init__(self, folders: Iterable[Path]) -> None:
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
        self._tools = tools
        logger.info("loaded %d tools", len(self._tools))

    async def discover_servers(self) -> list[str]:
        """Discover every McpServer's tools (`server_discovery.discover`, one server at a time) and add them.

        A server that cannot be discovered is logged and left out (its tools are not listed until the next
        start): one broken server does not stop the others. A listed tool left out by `servers.tool_specs`
        is logged with its reason. Returns those messages.

        Raises:
            InvalidToolManifest: a discovered tool's name (with the server's prefix) is already another
                tool's; the message names both.
        """
        problems: list[str] = []
        for server in self.servers:
            try:
                found = await server_discovery.discover(server)
            except server_discovery.DiscoveryFailed as exc:
                logger.error("McpServer %s is left out: %s", server.name, exc)
                problems.append(str(exc))
                continue
            specs, refusals = servers.tool_specs(server, found, BRIDGE_COMMAND)
            for refusal in refusals:
                logger.warning("%s", refusal)
            problems.extend(refusals)
            for spec in specs:
                if spec.name in self._tools:
                    raise InvalidToolManifest(
                        f"{server.source}: tool {spec.name!r} of McpServer {server.name!r} clashes with tool "
                        f"{spec.name!r} declared in {self._tools[spec.name].source} (set spec.toolNamePrefix)"
                    )
            self._tools.update((spec.name, spec) for spec in specs)
            logger.info(
                "McpServer %s (%s, protocol %s): %d tools",
                server.name,
                found.server_info.get("name", "?"),
                found.protocol_version,
                len(specs),
            )
        return problems

    def list_tools(self) -> Sequence[ToolSpec]:
        """All tools, in declaration order (folders, then sorted files, then documents)."""
        return list(self._tools.values())

    def get_tool(self, name: str) -> ToolSpec | None:
        """The tool named `name`, or `None`."""
        return self._tools.get(name)
