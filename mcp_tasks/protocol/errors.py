"""JSON-RPC error objects we send, one class per code, and the only code → HTTP status table.

Codes come from MCP 2026-07-28 `schema.ts` (see `mcp_types.jsonrpc`); HTTP statuses from
`streamable-http.mdx` (-32601 → 404, envelope and header errors → 400). The gateway's error
mapper turns these into responses; nothing here knows about aiohttp.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final

from mcp_types import jsonrpc

from mcp_tasks.protocol import constants

JsonObject = dict[str, Any]
"""A JSON object at the wire boundary, before validation into a model."""


class ProtocolError(Exception):
    """A JSON-RPC error response to send (code, message, optional `data`).

    Subclasses fix `code`; `http_status` is looked up in `HTTP_STATUS_BY_CODE`.
    """

    code: ClassVar[int] = jsonrpc.INTERNAL_ERROR

    def __init__(self, message: str, data: JsonObject | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.data = data

    @property
    def http_status(self) -> int:
        """HTTP status for this error on Streamable HTTP (400, 404 or 500 family)."""
        return HTTP_STATUS_BY_CODE.get(self.code, 200)

    def to_error_object(self) -> JsonObject:
        """Return the JSON-RPC `error` member: `{code, message, data?}`."""
        error: JsonObject = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


class ParseError(ProtocolError):
    """-32700: the body is not valid JSON."""

    code = jsonrpc.PARSE_ERROR


class InvalidRequest(ProtocolError):
    """-32600: valid JSON that is not a single JSON-RPC 2.0 request or notification."""

    code = jsonrpc.INVALID_REQUEST


class MethodNotFound(ProtocolError):
    """-32601 (HTTP 404): unknown or removed method (`tasks/result`, `tasks/list`, `initialize`, `ping`, ...)."""

    code = jsonrpc.METHOD_NOT_FOUND


class InvalidParams(ProtocolError):
    """-32602: bad params, missing `_meta`, unknown tool, or an unknown/expired/foreign `taskId`."""

    code = jsonrpc.INVALID_PARAMS


class InternalError(ProtocolError):
    """-32603: an unexpected failure; the message is generic, details go to the log."""

    code = jsonrpc.INTERNAL_ERROR


class ServiceUnavailable(InternalError):
    """-32603 with HTTP 503 and `Retry-After`: the task store cannot answer now; the request may be retried.

    The message says what is unavailable and why (never a secret); `retry_after_s` goes in `Retry-After`.
    """

    def __init__(self, message: str, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s

    @property
    def http_status(self) -> int:
        """Always 503 (RFC 9110 §15.6.4): the condition is temporary, unlike a generic -32603's 500."""
        return 503


class TooManyRequests(InternalError):
    """-32603 with HTTP 429: a limit of this installation refuses the request (docs/fair-share.md).

    `data` = `{limit, maximum, retryAfterMs?}`: the setting that refuses (`max_unfinished_per_principal`,
    `task_create_rate_per_principal`, ...), its value for the caller, and when a retry may succeed in
    milliseconds (also `Retry-After`, in whole seconds rounded up); no `retryAfterMs` when only the
    caller can make room (finishing or cancelling its tasks). -32603 because the spec reserves -32020 to
    -32099 for itself and asks new servers not to use -32000 to -32019; the HTTP status and `data.limit`
    say what happened, as `ServiceUnavailable` does with 503.
    """

    def __init__(self, message: str, limit: str, maximum: float, retry_after_ms: int | None = None) -> None:
        data: JsonObject = {"limit": limit, "maximum": maximum}
        if retry_after_ms is not None:
            data["retryAfterMs"] = retry_after_ms
        super().__init__(message, data)
        self.retry_after_ms = retry_after_ms

    @property
    def retry_after_s(self) -> int | None:
        """`Retry-After` in whole seconds (at least 1), or `None` without a known time."""
        return None if self.retry_after_ms is None else max(1, -(-self.retry_after_ms // 1000))

    @property
    def http_status(self) -> int:
        """Always 429 (RFC 6585 §4)."""
        return 429


class HeaderMismatch(ProtocolError):
    """-32020 (HTTP 400): a required header is missing, malformed, or disagrees with the body (SEP-2243)."""

    code = jsonrpc.HEADER_MISMATCH


class MissingRequiredClientCapability(ProtocolError):
    """-32021 (HTTP 400): the request's `clientCapabilities` lack what the operation needs.

    `data.requiredCapabilities` is a `ClientCapabilities` object, e.g.
    `{"extensions": {"io.modelcontextprotocol/tasks": {}}}` or `{"sampling": {}}`.
    """

    code = jsonrpc.MISSING_REQUIRED_CLIENT_CAPABILITY

    def __init__(self, message: str, required_capabilities: JsonObject) -> None:
        super().__init__(message, {"requiredCapabilities": required_capabilities})

    @classmethod
    def tasks_extension(cls, what: str) -> MissingRequiredClientCapability:
        """The -32021 for a request that needs the tasks extension (SEP-2663 Negotiation)."""
        return cls(
            f"{what} requires the {constants.TASKS_EXTENSION} extension: declare it in "
            f"_meta['{constants.META_CLIENT_CAPABILITIES}'].extensions on this request",
            {"extensions": {constants.TASKS_EXTENSION: {}}},
        )


class UnsupportedProtocolVersion(ProtocolError):
    """-32022 (HTTP 400): the requested protocol version is not served; `data = {supported, requested}`."""

    code = jsonrpc.UNSUPPORTED_PROTOCOL_VERSION

    def __init__(self, requested: str) -> None:
        super().__init__(
            f"Unsupported protocol version {requested!r}; this server speaks "
            f"{', '.join(constants.MODERN_PROTOCOL_VERSIONS)} in each request's _meta, and "
            f"{', '.join(constants.LEGACY_PROTOCOL_VERSIONS)} after an initialize",
            {"supported": list(constants.SUPPORTED_PROTOCOL_VERSIONS), "requested": requested},
        )


HTTP_STATUS_BY_CODE: Final[dict[int, int]] = {
    jsonrpc.PARSE_ERROR: 400,
    jsonrpc.INVALID_REQUEST: 400,
    jsonrpc.INVALID_PARAMS: 400,
    jsonrpc.METHOD_NOT_FOUND: 404,
    jsonrpc.INTERNAL_ERROR: 500,
    jsonrpc.HEADER_MISMATCH: 400,
    jsonrpc.MISSING_REQUIRED_CLIENT_CAPABILITY: 400,
    jsonrpc.UNSUPPORTED_PROTOCOL_VERSION: 400,
}
"""JSON-RPC code → HTTP status on Streamable HTTP (the PYSDK `inbound.py` table, which the spec's rules agree with)."""
