"""The method table: which JSON-RPC methods we serve, and which need the tasks extension.

Anything not in the table — including the removed `tasks/result`, `tasks/list`, `initialize` and
`ping` — is -32601 with HTTP 404 (protocol.md §2.1, §7.7).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

from mcp_tasks.gateway import artifacts, discovery, task_methods, tool_calls
from mcp_tasks.gateway.context import RequestContext
from mcp_tasks.protocol import constants
from mcp_tasks.protocol.errors import JsonObject, MethodNotFound, MissingRequiredClientCapability

Handler = Callable[[RequestContext], Awaitable[JsonObject]]


@dataclass(frozen=True, slots=True)
class Route:
    """A served method: its handler and whether the request must declare the tasks extension."""

    handler: Handler
    needs_tasks_extension: bool = False


METHODS: Final[dict[str, Route]] = {
    constants.METHOD_DISCOVER: Route(discovery.discover),
    constants.METHOD_TOOLS_LIST: Route(discovery.list_tools),
    constants.METHOD_TOOLS_CALL: Route(tool_calls.call_tool),
    "resources/list": Route(discovery.list_resources),
    "resources/templates/list": Route(discovery.list_resource_templates),
    constants.METHOD_RESOURCES_READ: Route(artifacts.read_resource),
    constants.METHOD_TASKS_GET: Route(task_methods.get_task, needs_tasks_extension=True),
    constants.METHOD_TASKS_UPDATE: Route(task_methods.update_task, needs_tasks_extension=True),
    constants.METHOD_TASKS_CANCEL: Route(task_methods.cancel_task, needs_tasks_extension=True),
}


def route(method: str) -> Route:
    """Look up a method.

    Raises:
        MethodNotFound: unknown or removed method (-32601, HTTP 404).
    """
    found = METHODS.get(method)
    if found is None:
        raise MethodNotFound(f"Method not found: {method}")
    return found


def gate(found: Route, ctx: RequestContext) -> None:
    """The tasks capability gate, before any task lookup (SEP-2663 Error Handling).

    Raises:
        MissingRequiredClientCapability: a `tasks/*` request that did not declare the extension (-32021).
    """
    if found.needs_tasks_extension and not ctx.envelope.declares_tasks:
        raise MissingRequiredClientCapability.tasks_extension(ctx.message.method)
