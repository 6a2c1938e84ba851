"""Both catalogs' handling of McpServer listings: unchanged listings are not rebuilt, the cap keeps the old
tools, and the handoff follow tools' names are taken (`store/manifests.py`, `store/kubernetes/catalog.py`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client import ApiClient

from mcp_tasks.store import manifests, server_discovery
from mcp_tasks.store.kubernetes.catalog import KubernetesToolCatalog
from mcp_tasks.tasks.servers import MAX_SERVER_TOOLS, Discovery, ServerSpec

ECHO: dict[str, Any] = {"name": "echo", "inputSchema": {"type": "object"}}
FOLLOW = {**ECHO, "name": "task_status"}
SERVER: dict[str, Any] = {
    "apiVersion": "mcptasks.io/v1alpha1",
    "kind": "McpServer",
    "metadata": {"name": "srv"},
    "spec": {"container": {"command": ["true"]}, "resyncIntervalSeconds": 0},
}


class Listings:
    """Stands in for `server_discovery.discover` (which runs the bridge): answers the listing set last."""

    def __init__(self) -> None:
        self.tools: list[dict[str, Any]] = [ECHO]

    async def discover(self, server: ServerSpec) -> Discovery:
        return Discovery(protocol_version="2025-06-18", server_info={"name": "t"}, tools=tuple(self.tools))


@pytest.fixture
def listings(monkeypatch: pytest.MonkeyPatch) -> Listings:
    listings = Listings()
    monkeypatch.setattr(server_discovery, "discover", listings.discover)
    return listings


def _catalog(tmp_path: Path) -> manifests.FileToolCatalog:
    (tmp_path / "srv.yaml").write_text(yaml.safe_dump(SERVER), encoding="utf-8")
    return manifests.FileToolCatalog([tmp_path])


async def test_an_unchanged_listing_is_not_rebuilt_and_a_changed_one_is(tmp_path: Path, listings: Listings) -> None:
    """Our own choice: a resync that finds the same listing keeps the same specs (no schema checks again)."""
    catalog = _catalog(tmp_path)
    assert await catalog.discover_servers() == []
    first = catalog.get_tool("echo")
    assert first is not None
    assert await catalog._discover(catalog.servers[0], starting=False) == []
    assert catalog.get_tool("echo") is first
    listings.tools = [{**ECHO, "description": "changed"}]
    await catalog._discover(catalog.servers[0], starting=False)
    changed = catalog.get_tool("echo")
    assert changed is not first and changed is not None and changed.tool.description == "changed"


async def test_a_listing_over_the_cap_fails_discovery_and_keeps_the_old_tools(
    tmp_path: Path, listings: Listings, caplog: pytest.LogCaptureFixture
) -> None:
    """Our own choice: more than MAX_SERVER_TOOLS tools is a failed discovery, logged; the tools it had stay."""
    catalog = _catalog(tmp_path)
    await catalog.discover_servers()
    listings.tools = [{**ECHO, "name": f"t{i}"} for i in range(MAX_SERVER_TOOLS + 1)]
    problems = await catalog._discover(catalog.servers[0], starting=False)
    assert len(problems) == 1 and f"lists {MAX_SERVER_TOOLS + 1} tools" in problems[0]
    assert [spec.name for spec in catalog.list_tools()] == ["echo"]
    assert any("keeps the tools it had" in record.getMessage() for record in caplog.records)


async def test_the_embedded_catalog_refuses_a_server_tool_named_like_a_follow_tool(
    tmp_path: Path, listings: Listings
) -> None:
    """Our own choice: a server tool never takes over a follow tool, under its default or its configured name."""
    listings.tools = [ECHO, FOLLOW, {**ECHO, "name": "follow"}]
    (tmp_path / "srv.yaml").write_text(yaml.safe_dump(SERVER), encoding="utf-8")
    catalog = manifests.FileToolCatalog([tmp_path], ("follow", "task_respond", "task_cancel"))
    problems = await catalog.discover_servers()
    assert [spec.name for spec in catalog.list_tools()] == ["echo", "task_status"]
    assert len(problems) == 1 and "'follow'" in problems[0] and "spec.toolNamePrefix" in problems[0]


@pytest.fixture
async def kube_catalog() -> AsyncIterator[KubernetesToolCatalog]:
    async with ApiClient() as api:  # never used: the objects are fed as the reflector would
        yield KubernetesToolCatalog(api, "ns")


def _discovered(tools: list[dict[str, Any]], generation: int = 1) -> dict[str, Any]:
    status = {"protocolVersion": "2025-06-18", "serverInfo": {"name": "t"}, "tools": tools}
    return {**SERVER, "metadata": {"name": "srv", "generation": generation}, "status": status}


async def test_the_kubernetes_catalog_refuses_a_follow_tool_name_and_rebuilds_only_changed_listings(
    kube_catalog: KubernetesToolCatalog,
) -> None:
    """Our own choice: as embedded; and a rebuild for another object's change reuses an unchanged server's specs."""
    sink = kube_catalog._servers  # what the McpServer reflector feeds
    sink.apply_event("ADDED", _discovered([ECHO, FOLLOW]))
    verdict = kube_catalog.server_verdicts()["srv"]
    assert verdict.served == ("echo",)
    assert (
        len(verdict.refusals) == 1 and "'task_status'" in verdict.refusals[0] and "follow tool" in verdict.refusals[0]
    )
    first = kube_catalog.get_tool("echo")
    sink.apply_event("MODIFIED", _discovered([ECHO, FOLLOW]))
    assert kube_catalog.get_tool("echo") is first
    sink.apply_event("MODIFIED", _discovered([{**ECHO, "description": "changed"}]))
    changed = kube_catalog.get_tool("echo")
    assert changed is not first and changed is not None and changed.tool.description == "changed"
