"""JSON-RPC responses as HTTP, with their outcome noted for the request metrics (`gateway.app`)."""

from __future__ import annotations

import json
from typing import Final

from aiohttp import web

from mcp_tasks.protocol.errors import JsonObject

RESPONSE_CODE_KEY: Final = web.ResponseKey("mcp_code", str)
"""Where a JSON-RPC response notes its outcome (`ok` or the error code) for the request metrics."""

REQUEST_METHOD_KEY: Final = web.RequestKey("mcp_method", str)
"""Where a parsed request notes its JSON-RPC method for the request metrics."""

METHOD_LABEL_RESPONSE: Final = "(response)"
"""The method label of a client's JSON-RPC response to one of our input requests (legacy era)."""


def json_response(body: JsonObject, status: int = 200) -> web.Response:
    """A JSON-RPC response body as `application/json`, its outcome noted for the request metrics."""
    response = web.Response(
        body=json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode(),
        status=status,
        content_type="application/json",
    )
    error = body.get("error")
    response[RESPONSE_CODE_KEY] = str(error.get("code")) if isinstance(error, dict) else "ok"
    return response


SSE_HEADERS: Final = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
"""Headers of every SSE response we stream (no caching, no proxy buffering)."""


def sse_frame(message: JsonObject) -> bytes:
    """One JSON-RPC message as an SSE `message` event: single-line compact JSON on one `data:` line."""
    return b"event: message\ndata: " + json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"
