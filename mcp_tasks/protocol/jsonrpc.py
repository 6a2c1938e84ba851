"""JSON-RPC 2.0 envelope: decode one POST body into a request or notification, build responses.

The 2026-07-28 Streamable HTTP transport carries exactly one JSON-RPC request or notification per
POST; batches and client-sent responses are invalid (`streamable-http.mdx` §Sending Messages).
Pure functions; the gateway calls them first on every POST.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Final

from mcp_tasks.protocol.errors import InvalidParams, InvalidRequest, JsonObject, ParseError, ProtocolError

MAX_DEPTH: Final = 128
"""Deepest nesting of objects and arrays a body may have. Far beyond any tool's arguments, and well inside
what every later step (JSON Schema validation, the stores' encoders, the response) handles without
running out of stack: one depth limit, at the door, instead of a RecursionError somewhere inside."""

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
    """Decode a POST body as JSON text in UTF-8 (RFC 8259 §8.1), strictly.

    Strict means: bytes that are not UTF-8 (including encoded surrogates such as `ED A0 80`, which
    Python's own `json.loads(bytes)` lets through) are refused, as are `NaN`/`Infinity`, numbers that
    overflow a 64-bit float, and nesting deeper than `MAX_DEPTH`. A lone surrogate *escape*
    (backslash-u D800 to DFFF) is valid JSON syntax and is left to `parse_message`, which names the
    field that holds it.

    Raises:
        ParseError: the body is not UTF-8, not JSON, or nested deeper than `MAX_DEPTH` (-32700).
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ParseError(
            f"Parse error: the request body is not UTF-8 (invalid byte at offset {exc.start}); send UTF-8 JSON"
        ) from exc
    try:
        payload = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except ValueError as exc:
        raise ParseError("Parse error: the request body is not valid JSON") from exc
    except RecursionError as exc:
        raise ParseError(f"Parse error: the request body is nested deeper than {MAX_DEPTH} levels") from exc
    # Only a body with that many brackets can be that deep: the walk runs for few requests.
    if body.count(b"[") + body.count(b"{") > MAX_DEPTH and _depth_exceeds(payload, MAX_DEPTH):
        raise ParseError(f"Parse error: the request body is nested deeper than {MAX_DEPTH} levels")
    return payload


def _depth_exceeds(value: Any, limit: int) -> bool:
    """Tell whether objects and arrays in `value` nest deeper than `limit` levels (iterative, no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def _has_surrogate(text: str) -> bool:
    return _SURROGATE.search(text) is not None


def may_escape_surrogates(body: bytes) -> bool:
    """Cheap pre-check on the raw body: could it hold a surrogate escape (backslash-u D800 to DFFF)."""
    return b"\\ud" in body or b"\\uD" in body


def lone_surrogate_path(value: Any, path: str = "") -> str | None:
    """Where in a decoded JSON value a string or key holds a lone UTF-16 surrogate, or `None`.

    The path reads like the client's own access: `params.arguments.x[1]`. Only JSON escapes can
    produce such strings once the body passed strict UTF-8 decoding; none can be stored or echoed.
    """
    stack: list[tuple[str, Any]] = [(path, value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, str):
            if _has_surrogate(item):
                return where or "(root)"
        elif isinstance(item, dict):
            for key, child in item.items():
                if _has_surrogate(key):
                    return f"{where}.(key)" if where else "(key)"
                stack.append((f"{where}.{key}" if where else key, child))
        elif isinstance(item, list):
            stack.extend((f"{where}[{index}]", child) for index, child in enumerate(item))
    return None


def peek_request_id(payload: Any) -> RequestId | None:
    """Best-effort `id` of a payload that may be invalid, so an error response can echo it."""
    if isinstance(payload, dict):
        request_id = payload.get("id")
        if isinstance(request_id, str) and not _has_surrogate(request_id):
            return request_id
        if isinstance(request_id, int) and not isinstance(request_id, bool):
            return request_id
    return None


def parse_message(payload: Any, *, may_hold_surrogates: bool = True) -> Message:
    """Validate a decoded payload as a single JSON-RPC 2.0 request or notification.

    `may_hold_surrogates=False` (from `may_escape_surrogates` on the raw body) skips the walk for lone
    surrogates. `params` must be an object: JSON-RPC 2.0 §4.2 also allows an array (by-position),
    which no MCP method takes, so an array is -32602; a string, number or boolean is no structured
    value at all (-32600).

    Raises:
        InvalidRequest: a batch, a response, a missing/invalid `jsonrpc`, `method`, `id` or `params`, or a
            lone surrogate escape outside `params` (-32600).
        InvalidParams: `params` is an array, or holds a lone surrogate escape; the message names where (-32602).
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
    if isinstance(params, list):
        raise InvalidParams(f"Invalid params: {method} takes its params by name, as an object, not as an array")
    if not isinstance(params, dict):
        raise InvalidRequest('Invalid Request: "params" must be an object')
    where = lone_surrogate_path(payload) if may_hold_surrogates else None
    if where is not None:
        problem = f"{where} holds a lone UTF-16 surrogate escape (\\ud800-\\udfff), which is no Unicode character"
        if where.startswith("params"):
            raise InvalidParams(f"Invalid params: {problem}; send valid Unicode text")
        raise InvalidRequest(f"Invalid Request: {problem}")
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
