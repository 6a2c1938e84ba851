"""The method table: every JSON-RPC method and notification we serve, in each protocol era.

A `Route` names its method, the parser of its params (`protocol.params`), its handler, the eras that
serve it, whether the request must declare the tasks extension, and whether its answer may stream
progress. A handler is `async def handler(ctx: RequestContext, params: P) -> Answer`: it gets params
already of its type, and its caller (`ctx.identity`) and era (`ctx.era`) in the context `transport`
builds once per request after authentication; nothing is ambient, so a request without a caller never
reaches a handler. `Route.serve` runs the tasks gate, then the parser, then the handler: a request that
did not declare the extension is refused before its params are looked at (SEP-2663 Error Handling).

The era is chosen once per request (`era_of`) and selects its table: a method served alike in both eras
has one row (`BOTH`), one served differently has a row per era (the legacy rows' handlers live in
`legacy`). Anything not in the era's table, including the removed `tasks/result` and `tasks/list`, and
`initialize` and `ping` in the modern era, is -32601 (HTTP 404 in the modern era; a legacy error travels
with HTTP 200) (protocol.md §2.1, §7.7). A notification without a row is accepted (202) and ignored.
Called by `transport` only; never reads the HTTP request.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

from aiohttp import web

from mcp_tasks.gateway import artifacts, discovery, legacy, listen, task_methods, tool_calls
from mcp_tasks.gateway.context import Era, RequestContext
from mcp_tasks.protocol import constants
from mcp_tasks.protocol.errors import JsonObject, MethodNotFound, MissingRequiredClientCapability
from mcp_tasks.protocol.jsonrpc import Message
from mcp_tasks.protocol.models import TaskRequestParams, UpdateTaskRequestParams
from mcp_tasks.protocol.params import (
    CallToolParams,
    CancelledParams,
    InitializeParams,
    ListenParams,
    NoParams,
    PageParams,
    ReadResourceParams,
    validated,
)

P = TypeVar("P")

Answer = JsonObject | web.StreamResponse
"""What a handler answers: a result object (the era frames it as the JSON-RPC response), or a response
of its own (an SSE stream, or a legacy `initialize` with its session header). A notification's is dropped."""

MODERN: Final = frozenset({Era.MODERN})
LEGACY: Final = frozenset({Era.LEGACY})
BOTH: Final = frozenset(Era)


@dataclass(frozen=True, slots=True)
class Route(Generic[P]):
    """One served method in the eras of `eras`.

    Attributes:
        method: the JSON-RPC method name.
        params: parses the request's `params` object into what `handler` takes; raises `InvalidParams`
            (-32602) naming the field.
        handler: answers the request, given its context (caller, era, envelope) and its parsed params.
        eras: the protocol eras that serve this row.
        needs_tasks_extension: the request must declare `io.modelcontextprotocol/tasks` (-32021 if not).
        reports_progress: a `_meta.progressToken` turns the answer into an SSE stream at the first progress
            report (modern `tools/call`, `gateway.progress`).
        notification: the row serves a notification (no `id`, no answer), not a request.
    """

    method: str
    params: Callable[[JsonObject], P]
    handler: Callable[[RequestContext, P], Awaitable[Answer]]
    eras: frozenset[Era]
    needs_tasks_extension: bool = False
    reports_progress: bool = False
    notification: bool = False

    async def serve(self, ctx: RequestContext) -> Answer:
        """The tasks gate, then the params, then the handler.

        Raises:
            MissingRequiredClientCapability: the route needs the tasks extension and the request did not
                declare it (-32021), before any lookup.
            InvalidParams: the params do not parse (-32602).
            Exception: whatever the handler raises, for the one mapper (`transport.map_exception`).
        """
        if self.needs_tasks_extension and not ctx.envelope.declares_tasks:
            raise MissingRequiredClientCapability.tasks_extension(self.method)
        return await self.handler(ctx, self.params(ctx.message.params))


_TASK_PARAMS: Final = validated(TaskRequestParams)

ROUTES: Final = (  # not annotated `tuple[Route[Any], ...]`: so mypy checks each row's parser against its handler
    Route(constants.METHOD_DISCOVER, NoParams.parse, discovery.discover, MODERN),
    Route(constants.METHOD_TOOLS_LIST, PageParams.parse, discovery.list_tools, MODERN),
    Route(constants.METHOD_TOOLS_LIST, PageParams.parse, legacy.list_tools, LEGACY),
    Route(constants.METHOD_TOOLS_CALL, CallToolParams.parse, tool_calls.call_tool, MODERN, reports_progress=True),
    Route(constants.METHOD_TOOLS_CALL, CallToolParams.parse, legacy.call_tool, LEGACY),
    Route(constants.METHOD_RESOURCES_LIST, PageParams.parse, discovery.list_resources, BOTH),
    Route(constants.METHOD_RESOURCE_TEMPLATES_LIST, PageParams.parse, discovery.list_resource_templates, BOTH),
    Route(constants.METHOD_RESOURCES_READ, ReadResourceParams.parse, artifacts.read_resource, BOTH),
    Route(constants.METHOD_TASKS_GET, _TASK_PARAMS, task_methods.get_task, MODERN, needs_tasks_extension=True),
    Route(
        constants.METHOD_TASKS_UPDATE,
        validated(UpdateTaskRequestParams),
        task_methods.update_task,
        MODERN,
        needs_tasks_extension=True,
    ),
    Route(constants.METHOD_TASKS_CANCEL, _TASK_PARAMS, task_methods.cancel_task, MODERN, needs_tasks_extension=True),
    Route(constants.METHOD_SUBSCRIPTIONS_LISTEN, ListenParams.parse, listen.listen, MODERN),
    Route(constants.METHOD_INITIALIZE, InitializeParams.parse, legacy.initialize, LEGACY),
    Route(constants.METHOD_PING, NoParams.parse, legacy.ping, LEGACY),
    Route(constants.NOTIFICATION_INITIALIZED, NoParams.parse, legacy.initialized, LEGACY, notification=True),
    Route(constants.NOTIFICATION_CANCELLED, CancelledParams.parse, legacy.cancelled, LEGACY, notification=True),
)
"""Every method and notification the gateway serves, one row per (method, era)."""

METHODS: Final = frozenset(row.method for row in ROUTES)
"""Every method and notification name some era serves (the bounded `method` label of the request metrics)."""


_TABLES: Final[dict[Era, dict[str, Route[Any]]]] = {
    era: {row.method: row for row in ROUTES if era in row.eras} for era in Era
}
"""Each era's rows by method (a test holds every (method, era) to one row)."""


def era_of(headers: Mapping[str, str], message: Message) -> Era:
    """The era `message` speaks (`legacy.selects_legacy`); chosen once per request, at the entry."""
    return Era.LEGACY if legacy.selects_legacy(headers, message) else Era.MODERN


def route(era: Era, method: str) -> Route[Any]:
    """The row that serves request `method` in `era`.

    Raises:
        MethodNotFound: no request of that name is served in `era` (-32601; HTTP 404 in the modern era).
    """
    found = _TABLES[era].get(method)
    if found is None or found.notification:
        raise MethodNotFound(f"Method not found: {method}")
    return found


def notification(era: Era, method: str) -> Route[Any] | None:
    """The row that serves notification `method` in `era`, or `None` (accepted and ignored)."""
    found = _TABLES[era].get(method)
    return found if found is not None and found.notification else None
