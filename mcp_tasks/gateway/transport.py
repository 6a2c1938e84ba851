"""Streamable HTTP (stateless, MCP 2026-07-28) on `POST /mcp`: the only place that speaks HTTP.

Per POST: `Origin`/`Host` check (403) → bounded body (413) → JSON (-32700) → one JSON-RPC message
(-32600) → notification? 202 → authentication (401) → `_meta`/headers/version (-32602/-32020/-32022)
→ method (-32601/404) → tasks gate (-32021) → handler. GET and DELETE get 405; `Mcp-Session-Id`
and `Last-Event-ID` are ignored. One mapper turns every exception into an error object.
"""

from __future__ import annotations

import json
import logging
from typing import Final
from urllib.parse import urlsplit

from aiohttp import web

from mcp_tasks.gateway import dispatch, listen
from mcp_tasks.gateway.auth import Authenticator, Unauthenticated
from mcp_tasks.gateway.context import RequestContext, Services
from mcp_tasks.protocol import constants
from mcp_tasks.protocol.errors import InternalError, InvalidParams, InvalidRequest, JsonObject, ProtocolError
from mcp_tasks.protocol.headers import validate_envelope
from mcp_tasks.protocol.jsonrpc import (
    RequestId,
    decode_body,
    error_response,
    parse_message,
    peek_request_id,
    result_response,
)
from mcp_tasks.tasks.errors import (
    InvalidInputResponse,
    StoreUnavailable,
    TaskNotFound,
    UnstorableValue,
    VersionConflict,
)

logger = logging.getLogger("mcp_tasks.gateway")

SERVICES_KEY: Final = web.AppKey("services", Services)
AUTHENTICATOR_KEY: Final = web.AppKey("authenticator", Authenticator)
_LOOPBACK_HOSTS: Final = frozenset({"localhost", "127.0.0.1", "[::1]", "::1"})


def _json(body: JsonObject, status: int = 200) -> web.Response:
    return web.Response(
        body=json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode(),
        status=status,
        content_type="application/json",
    )


def _error(request_id: RequestId | None, error: ProtocolError, status: int | None = None) -> web.Response:
    return _json(error_response(request_id, error), status or error.http_status)


def _host_only(value: str) -> str:
    if value.startswith("["):
        return value[: value.find("]") + 1]
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def _origin_allowed(request: web.Request, services: Services) -> bool:
    settings = services.settings
    origin = request.headers.get("Origin")
    if settings.loopback_only and _host_only(request.headers.get("Host", "localhost")) not in _LOOPBACK_HOSTS:
        return False
    if origin is None or origin in settings.allowed_origins:
        return True
    host = urlsplit(origin).hostname or ""
    return settings.loopback_only and (host in _LOOPBACK_HOSTS or f"[{host}]" in _LOOPBACK_HOSTS)


async def _read_body(request: web.Request, limit: int) -> bytes | None:
    """The whole body, or `None` when it exceeds `limit` bytes (declared or actual, chunked or not)."""
    if (request.content_length or 0) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_any():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def map_exception(exc: Exception) -> ProtocolError:
    """The one exception → JSON-RPC error mapper (CONVENTIONS.md §Errors)."""
    if isinstance(exc, ProtocolError):
        return exc
    if isinstance(exc, TaskNotFound):
        return InvalidParams("Failed to retrieve task: Task not found")
    if isinstance(exc, InvalidInputResponse | UnstorableValue):
        return InvalidParams(f"Invalid params: {exc}")
    if isinstance(exc, VersionConflict):
        return InternalError("The task is being changed concurrently; retry the request")
    if isinstance(exc, StoreUnavailable):
        logger.warning("task store unavailable: %s", exc)
        return InternalError("The task store is unavailable; retry the request")
    logger.exception("unexpected error while handling a request", exc_info=exc)
    return InternalError("Internal error")


async def handle_post(request: web.Request) -> web.StreamResponse:
    """Serve one JSON-RPC message POSTed to the MCP endpoint."""
    services = request.app[SERVICES_KEY]
    if not _origin_allowed(request, services):
        return _error(None, InvalidRequest("Forbidden: Origin or Host is not allowed"), 403)
    body = await _read_body(request, services.settings.max_body_bytes)
    if body is None:
        limit = services.settings.max_body_bytes
        too_large = _error(None, InvalidRequest(f"Request body exceeds {limit} bytes; send less"), 413)
        too_large.force_close()  # do not keep reading an oversized body on a kept-alive connection
        return too_large
    request_id: RequestId | None = None
    try:
        payload = decode_body(body)
        request_id = peek_request_id(payload)
        message = parse_message(payload)
        if message.is_notification:
            return web.Response(status=202)
        try:
            owner = request.app[AUTHENTICATOR_KEY].authenticate(request.headers)
        except Unauthenticated as exc:
            response = _error(request_id, InvalidRequest(f"Unauthorized: {exc}"), 401)
            response.headers["WWW-Authenticate"] = 'Bearer realm="mcp-tasks"'
            return response
        envelope = validate_envelope(request.headers, message)
        if message.method == constants.METHOD_SUBSCRIPTIONS_LISTEN:
            ctx = RequestContext(message, envelope, owner, request.headers, services)
            return await listen.listen(request, ctx)
        found = dispatch.route(message.method)
        ctx = RequestContext(message, envelope, owner, request.headers, services)
        dispatch.gate(found, ctx)
        result = await found.handler(ctx)
    except Exception as exc:  # the one top-level mapper
        return _error(request_id, map_exception(exc))
    assert request_id is not None  # notifications returned above
    return _json(result_response(request_id, result))


async def method_not_allowed(request: web.Request) -> web.Response:
    """GET and DELETE: there is no standalone SSE stream and no session to delete (405)."""
    return web.Response(status=405, headers={"Allow": "POST"}, text="Use POST: MCP 2026-07-28 is stateless")
