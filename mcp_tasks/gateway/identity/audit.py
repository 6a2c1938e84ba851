"""The audit trail: one structured log line per authenticated request that calls a tool or touches a task.

An aiohttp middleware (`gate.install` adds it) that runs around `transport.handle_post`: once the
request is answered it writes, on the `mcp_tasks.audit` logger at INFO, who (tenant, subject, issuer,
mechanism), what (method, tool, task id) and how it ended (`ok`, the JSON-RPC error code, or
`http_<status>`). The time is the log record's. Never a token, an argument, an input response or a
result: the tool name and task id are the only values taken from the request, each bounded in length.
Refused requests have no principal and are counted by `mcptasks_auth_refusals_total` instead.
"""

from __future__ import annotations

import json
import logging
from typing import Final

from aiohttp import web
from aiohttp.typedefs import Handler

from mcp_tasks.gateway.identity.principal import IDENTITY_KEY, TOOL_KEY, Identity
from mcp_tasks.gateway.responses import REQUEST_METHOD_KEY, RESPONSE_CODE_KEY
from mcp_tasks.protocol import constants

logger = logging.getLogger("mcp_tasks.audit")

AUDITED_METHODS: Final = frozenset(
    {
        constants.METHOD_TOOLS_CALL,
        constants.METHOD_TASKS_GET,
        constants.METHOD_TASKS_UPDATE,
        constants.METHOD_TASKS_CANCEL,
        constants.METHOD_RESOURCES_READ,
        constants.METHOD_SUBSCRIPTIONS_LISTEN,
        "tasks/result",  # legacy era (2025-11-25)
        "tasks/list",
    }
)
"""Methods that call a tool or create, read, update or cancel a task (or read one's artifact)."""

MAX_NAME_CHARS: Final = 128
"""Longest tool name or task id written to an audit line (they are shorter; a client may send more)."""

_MAX_PARSED_BYTES: Final = 64 * 1024
"""Largest response parsed for the id of the task a `tools/call` created (a task handle is small)."""


def _created_task(response: web.StreamResponse) -> str | None:
    """The `taskId` of a `CreateTaskResult` answered in one piece (SEP-2663 Creating Tasks), else None."""
    if not isinstance(response, web.Response) or not isinstance(response.body, bytes):
        return None
    body = response.body
    if len(body) > _MAX_PARSED_BYTES or b'"resultType":"task"' not in body:
        return None
    try:
        result = json.loads(body).get("result")
    except ValueError:
        return None
    task_id = result.get("taskId") if isinstance(result, dict) else None
    return task_id if isinstance(task_id, str) else None


def _bounded(value: str | None) -> str | None:
    return None if value is None else value[:MAX_NAME_CHARS]


@web.middleware
async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Write the audit line of an authenticated MCP request once it is answered (or fails)."""
    outcome = "error"
    response: web.StreamResponse | None = None
    try:
        response = await handler(request)
        code = response.get(RESPONSE_CODE_KEY)
        outcome = code or ("ok" if response.status < 400 else f"http_{response.status}")
        return response
    finally:
        identity = request.get(IDENTITY_KEY)
        method = request.get(REQUEST_METHOD_KEY)
        # the local principal of an unconfigured loopback server authenticated nothing: no trail to keep
        if identity is not None and identity.mechanism != "local" and method in AUDITED_METHODS:
            name = request.headers.get(constants.HEADER_NAME)
            tool = request.get(TOOL_KEY, name) if method == constants.METHOD_TOOLS_CALL else None
            task_id = name if method in constants.TASK_METHODS else None
            if task_id is None and response is not None and method == constants.METHOD_TOOLS_CALL:
                task_id = _created_task(response)
            write(identity, method, tool, task_id, outcome)


def write(identity: Identity, method: str | None, tool: str | None, task_id: str | None, outcome: str) -> None:
    """One audit line: who (tenant, subject, issuer, mechanism), what (method, tool, task id), how it ended."""
    fields: dict[str, object] = {
        "audit": True,
        "method": _bounded(method),
        "tenant": identity.owner.tenant,
        "subject": identity.owner.subject,
        "issuer": identity.issuer,
        "mechanism": identity.mechanism,
        "tool": _bounded(tool),
        "taskId": _bounded(task_id),
        "outcome": outcome,
    }
    logger.info(
        "audit: %s by %s/%s via %s: %s",
        method,
        identity.owner.tenant,
        identity.owner.subject,
        identity.mechanism,
        outcome,
        extra={key: value for key, value in fields.items() if value is not None},
    )


def refused(request: web.BaseRequest, identity: Identity, reason: str) -> None:
    """The audit line of a verified principal refused before its body was read (a tenant its issuer may not
    vouch for): the method and name come from the `Mcp-Method` and `Mcp-Name` headers, the outcome is the
    refusal's reason.
    """
    method = request.headers.get(constants.HEADER_METHOD)
    name = request.headers.get(constants.HEADER_NAME)
    tool = name if method == constants.METHOD_TOOLS_CALL else None
    write(identity, method, tool, name if method in constants.TASK_METHODS else None, reason)
