"""`server/discover` and `tools/list` (MCP 2026-07-28 `server/discover.mdx`, `server/tools.mdx`)."""

from __future__ import annotations

from mcp_types import DiscoverResult, ListToolsResult, ServerCapabilities, ToolsCapability
from mcp_types._types import ResourcesCapability

from mcp_tasks.gateway import handoff
from mcp_tasks.gateway.context import RequestContext
from mcp_tasks.gateway.identity import scopes
from mcp_tasks.protocol import constants
from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.protocol.params import NoParams, PageParams, page_cursor


async def discover(ctx: RequestContext, params: NoParams) -> JsonObject:
    """Advertise versions, `tools`, `resources` (artifacts) and the tasks extension."""
    result = DiscoverResult(
        supported_versions=list(constants.SUPPORTED_PROTOCOL_VERSIONS),
        capabilities=ServerCapabilities(
            tools=ToolsCapability(),
            resources=ResourcesCapability(),
            extensions={constants.TASKS_EXTENSION: {}},
        ),
        ttl_ms=ctx.services.settings.list_ttl_ms,
        cache_scope="public",
        instructions=(
            "Long-running tools may answer tools/call with a task (resultType 'task'); poll tasks/get with "
            "Mcp-Name set to the taskId, answer inputRequests with tasks/update, stop with tasks/cancel."
            + handoff.instructions(ctx)
        ),
    )
    return ctx.complete(result.model_dump(by_alias=True, mode="json", exclude_none=True))


async def list_tools(ctx: RequestContext, params: PageParams) -> JsonObject:
    """One page of the tools the principal may call, in the catalog's deterministic order, with cache hints.

    A tool that names `requiredScopes` is listed only to principals holding them (`identity.scopes`); the
    list then varies by authorisation, so it is `cacheScope: private` (MCP 2026-07-28 `server/tools`). The
    handoff follow tools (`handoff.listed`) come last, when the principal sees a tool that hands off; the
    `outputSchema` of a tool that hands off also admits its handoff answer (`handoff.as_listed`).
    """
    offset = params.offset
    catalog = ctx.services.catalog.list_tools()
    default = ctx.services.settings.handoff_default
    tools = [handoff.as_listed(spec, default) for spec in scopes.visible(catalog, ctx.identity)] + handoff.listed(ctx)
    size = ctx.services.settings.list_page_size
    page = tools[offset : offset + size]
    result = ListToolsResult(
        tools=page,
        next_cursor=page_cursor(offset + size) if offset + size < len(tools) else None,
        ttl_ms=ctx.services.settings.list_ttl_ms,
        cache_scope="public" if scopes.shared(catalog) else "private",
    )
    return ctx.complete(result.model_dump(by_alias=True, mode="json", exclude_none=True))


async def list_resource_templates(ctx: RequestContext, params: PageParams) -> JsonObject:
    """`resources/templates/list`: artifacts have no templates; an empty list, cacheable (SEP-2549)."""
    return ctx.complete({"resourceTemplates": [], "ttlMs": ctx.services.settings.list_ttl_ms, "cacheScope": "public"})


async def list_resources(ctx: RequestContext, params: PageParams) -> JsonObject:
    """`resources/list`: artifacts are reached through the links in task results, so the list is empty."""
    return ctx.complete({"resources": [], "ttlMs": 0, "cacheScope": "private"})
