"""`FileToolCatalog`: the embedded default's tool catalog, read from `McpTool` YAML manifests in folders.

Every `*.yaml`/`*.yml` file in the given folders (one level deep) may hold one or more McpTool
documents. Tools are listed in a deterministic order (MCP 2026-07-28 `tools/list`): folders as given,
files sorted by name, documents in file order.
Loaded once at start-up; a broken manifest stops start-up with a message that names the file.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from pathlib import Path

import yaml

from mcp_tasks.tasks import pod_shape
from mcp_tasks.tasks.errors import InvalidToolManifest
from mcp_tasks.tasks.tools import ToolSpec, parse_manifest

logger = logging.getLogger("mcp_tasks.store.manifests")


def load_manifest_file(path: Path) -> list[ToolSpec]:
    """Parse every McpTool document in one YAML file.

    Raises:
        InvalidToolManifest: the YAML does not parse or a document is not a valid McpTool.
    """
    try:
        documents = [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc is not None]
    except yaml.YAMLError as exc:
        raise InvalidToolManifest(f"{path}: not valid YAML: {exc}") from exc
    return [parse_manifest(doc, source=str(path), base_dir=str(path.parent.resolve())) for doc in documents]


class FileToolCatalog:
    """A `ToolCatalog` over McpTool manifest files.

    Args:
        folders: folders to scan for `*.yaml`/`*.yml` manifests.

    Raises:
        InvalidToolManifest: a manifest is invalid, a folder is missing, or two manifests declare one tool name.
    """

    def __init__(self, folders: Iterable[Path]) -> None:
        tools: dict[str, ToolSpec] = {}
        for folder in folders:
            if not folder.is_dir():
                raise InvalidToolManifest(f"{folder}: tool folder does not exist (check --tools)")
            for path in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
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

    def list_tools(self) -> Sequence[ToolSpec]:
        """All tools, in declaration order (folders, then sorted files, then documents)."""
        return list(self._tools.values())

    def get_tool(self, name: str) -> ToolSpec | None:
        """The tool named `name`, or `None`."""
        return self._tools.get(name)
