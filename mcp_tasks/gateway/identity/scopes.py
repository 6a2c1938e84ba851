"""Scopes per tool (`McpTool.spec.requiredScopes`): which tools a principal sees and may call.

`tools/list` (`discovery`) shows a principal only the tools whose required scopes its token holds, and
then says the list is not shared between principals (`cacheScope: private`). A `tools/call` of a tool
whose scopes it lacks is `403` with `WWW-Authenticate: Bearer error="insufficient_scope", scope="…"`
(RFC 6750 §3.1; MCP §Authorization, scope challenge), answered by `transport` from the `Mcp-Name` header
before the body is read, and again from the parsed body (a legacy-era client sends no `Mcp-Name`). An
unknown tool is left to the ordinary error. Task methods stay owner-only whatever the scopes.

The request's identity is passed explicitly (`RequestContext.identity`): there is no ambient caller, so
a code path that has none cannot list anything.
"""

from __future__ import annotations

from collections.abc import Sequence

from mcp_tasks.gateway.identity.principal import Identity
from mcp_tasks.tasks.interfaces import ToolCatalog
from mcp_tasks.tasks.tools import ToolSpec


def visible(tools: Sequence[ToolSpec], identity: Identity) -> list[ToolSpec]:
    """The tools of `tools` that `identity` may call, in their order (`Identity.may_use`)."""
    return [tool for tool in tools if identity.may_use(tool.required_scopes)]


def shared(tools: Sequence[ToolSpec]) -> bool:
    """Whether the tool list is the same for every principal (no tool names scopes)."""
    return not any(tool.required_scopes for tool in tools)


def all_scopes(catalog: ToolCatalog) -> frozenset[str]:
    """Every scope some tool requires (the metadata's `scopes_supported`)."""
    return frozenset(scope for tool in catalog.list_tools() for scope in tool.required_scopes)


def missing(catalog: ToolCatalog, identity: Identity, tool_name: object) -> frozenset[str]:
    """The scopes `identity` lacks to call `tool_name` (empty: allowed, or no such tool)."""
    if not isinstance(tool_name, str):
        return frozenset()
    tool = catalog.get_tool(tool_name)
    if tool is None or identity.may_use(tool.required_scopes):
        return frozenset()
    return tool.required_scopes
