"""JSON-RPC 2.0 envelope: decode one POST body into a request or notification, build responses.

The 2026-07-28 Streamable HTTP transport carries exactly one JSON-RPC request or notification per
POST; batches and client-sent responses are invalid (`streamable-http.mdx` §Sending Messages).
Pure functions; the gateway calls them first on every POST.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from mcp_tasks.protocol.errors import InvalidRequest, JsonObject, ParseError, ProtocolError

RequestId = str | int
"""JSON-RPC request id as MCP allows it: a string or an integer (never `null`)."""


@dataclass(frozen=True, slots=True)
class Message:
    """One decoded JSON-RPC message from a client.

    `request_id` is `None` for a notification. `params` is always an object (`{}` when absent).
    """

    request_id: RequestId | None
    method: str
    params: JsonObject

    @property
    def is_notification(self) -> bool:
        """True when the message has no `id` and so gets no response (HTTP 202)."""
        return self.request_id is None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"{text} overflows a 64-bit float")
    return value


def decode_body(body: bytes) -> Any:
    """Decode a POST body as JSON.

    Raises:
        ParseError: the body is not UTF-8 JSON (RFC 8259: no `NaN`/`Infinity`, no number that overflows a
            64-bit float), is nested too deeply, or escapes a lone surrogate (-32700).
    """
    try:
        payload = json.loads(body, parse_constant=_reject_constant, parse_float=_finite_float)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ParseError("Parse error: the request body is not valid JSON") from exc
    except RecursionError as exc:
        raise ParseError("Parse error: the request body is nested too deeply") from exc
    if b"\\ud" in body or b"\\uD" in body:  # only escapes can smuggle lone surrogates past the UTF-8 decoder
        try:
            json.dumps(payload, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ParseError("Parse error: the request body has an invalid Unicode escape (lone surrogate)") from exc
    return payload


def peek_request_id(payload: Any) -> RequestId | None:
    """Best-effort `id` of a payload that may be invalid, so an error response can echo it."""
    if isinstance(payload, dict):
        request_id = payload.get("id")
        if isinstance(request_id, str) or (isinstance(request_id, int) and not isinstance(request_id, bool)):
            return request_id
    return None


def parse_message(payload: Any) -> Message:
    """Validate a decoded payload as a single JSON-RPC 2.0 request or notification.

    Raises:
        InvalidRequest: a batch, a response, a missing/invalid `jsonrpc`, `method`, `id` or `params` (-32600).
    """
    if isinstance(payload, list):
        raise InvalidRequest(
            "Invalid Request: JSON-RPC batches are not supported; send one request per POST (MCP 2026-07-28)"
        )
    if not isinstance(payload, dict):
        raise InvalidRequest("Invalid Request: the body must be a JSON-RPC 2.0 request object")
    if payload.get("jsonrpc") != "2.0":
        raise InvalidRequest('Invalid Request: "jsonrpc" must be "2.0"')
    if "method" not in payload and ("result" in payload or "error" in payload):
        raise InvalidRequest("Invalid Request: clients must not POST JSON-RPC responses on the 2026-07-28 wire")
    method = payload.get("method")
    if not isinstance(method, str) or not method:
        raise InvalidRequest('Invalid Request: "method" must be a non-empty string')
    request_id: RequestId | None = None
    if "id" in payload:
        request_id = peek_request_id(payload)
        if request_id is None:
            raise InvalidRequest('Invalid Request: "id" must be a string or an integer')
    params = payload.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise InvalidRequest('Invalid Request: "params" must be an object')
    return Message(request_id=request_id, method=method, params=params)


def result_response(request_id: RequestId, result: JsonObject) -> JsonObject:
    """Build `{"jsonrpc": "2.0", "id": ..., "result": ...}`."""
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def error_response(request_id: RequestId | None, error: ProtocolError) -> JsonObject:
    """Build `{"jsonrpc": "2.0", "id": ..., "error": {code, message, data?}}` (id `null` only if unknown)."""
    return {"jsonrpc": "2.0", "id": request_id, "error": error.to_error_object()}


def notification(method: str, params: JsonObject) -> JsonObject:
    """Build a JSON-RPC notification `{"jsonrpc": "2.0", "method": ..., "params": ...}`."""
    return {"jsonrpc": "2.0", "method": method, "params": params}
