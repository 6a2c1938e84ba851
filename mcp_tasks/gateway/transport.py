"""Streamable HTTP (stateless, MCP 2026-07-28, and the legacy era) on `POST /mcp`: the only place that speaks HTTP.

Per POST: `Origin`/`Host` check (403) → `Authorization` sent once (-32020, 400) → authentication on
headers (401) → the `Mcp-Name` tool's scopes (403) → body within its size, time and content coding
(413/408/415/400; a client that hangs up mid-body is logged once at INFO) → strict UTF-8 JSON (-32700)
→ a client's response to one of our input requests? (`legacy.accept_reply`) → one JSON-RPC message
(-32600; array params or lone surrogates in params -32602) → the body's tool's scopes (403) → the era,
chosen once (`dispatch.era_of`). Modern: notification? 202 → `_meta`/headers/version
(-32602/-32020/-32022) → method (-32601/404) → tasks gate (-32021) → params (-32602) → handler. Legacy:
session (404) → notification? 202 → method → params → handler, errors with HTTP 200. The handler is
the era's row of `dispatch.ROUTES`, given the authenticated caller in its context. GET and DELETE get 405;
`Last-Event-ID` is ignored, and so is `Mcp-Session-Id` on 2026-07-28 requests (a legacy-era request's is
checked by `legacy`: a signed id that scopes its JSON-RPC ids, 404 when it does not verify). One mapper
turns every exception into an error object.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import zlib
from collections.abc import Callable
from typing import Any, Final, cast
from urllib.parse import urlsplit

from aiohttp import web

from mcp_tasks.gateway import dispatch, legacy, progress
from mcp_tasks.gateway.auth import Authenticator
from mcp_tasks.gateway.context import Era, RequestContext, Services, client_gone
from mcp_tasks.gateway.identity import gate as identity_gate
from mcp_tasks.gateway.identity.principal import Identity
from mcp_tasks.gateway.responses import METHOD_LABEL_RESPONSE, REQUEST_METHOD_KEY, json_response
from mcp_tasks.gateway.settings import GatewaySettings
from mcp_tasks.observability.logs import bind_task
from mcp_tasks.protocol import constants
from mcp_tasks.protocol.errors import (
    HeaderMismatch,
    InternalError,
    InvalidParams,
    InvalidRequest,
    MissingRequiredClientCapability,
    ParseError,
    ProtocolError,
    ServiceUnavailable,
    TooManyRequests,
)
from mcp_tasks.protocol.headers import RequestEnvelope, refuse_repeated, validate_envelope
from mcp_tasks.protocol.jsonrpc import (
    Message,
    RequestId,
    decode_body,
    error_response,
    lone_surrogate_path,
    may_escape_surrogates,
    parse_message,
    peek_request_id,
    result_response,
)
from mcp_tasks.tasks.errors import (
    InputCapabilityMissing,
    InvalidInputResponse,
    LimitReached,
    StoreUnavailable,
    TaskError,
    TaskNotFound,
    UnstorableValue,
    VersionConflict,
)

logger = logging.getLogger("mcp_tasks.gateway")

SERVICES_KEY: Final = web.AppKey("services", Services)
AUTHENTICATOR_KEY: Final = web.AppKey("authenticator", Authenticator)
_LOOPBACK_HOSTS: Final = frozenset({"localhost", "127.0.0.1", "[::1]", "::1"})
_CONTENT_CODINGS: Final = frozenset({"", "identity", "gzip", "x-gzip", "deflate"})
"""Content codings a body may arrive in (RFC 9110 §8.4); `_BodyDecoder` undoes gzip and deflate."""


def _error(request_id: RequestId | None, error: ProtocolError, status: int | None = None) -> web.Response:
    return json_response(error_response(request_id, error), status or error.http_status)


def _host_only(value: str) -> str:
    value = value.lower()  # host names are case-insensitive (RFC 9110 §4.2.3)
    if value.startswith("["):
        return value[: value.find("]") + 1]
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def _is_loopback(host: str) -> bool:
    """`localhost` or a loopback address literal (any of 127.0.0.0/8, `::1`, bracketed or not)."""
    if host in _LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _origin_allowed(request: web.Request, services: Services) -> bool:
    """The DNS-rebinding check (Streamable HTTP §Security): `Host` on loopback, then `Origin`.

    An `Origin` that is not a parseable URL (`http://[`) is simply not an allowed origin.
    """
    settings = services.settings
    origin = request.headers.get("Origin")
    if settings.loopback_only and not _is_loopback(_host_only(request.headers.get("Host", "localhost"))):
        return False
    if origin is None or origin in settings.allowed_origins:
        return True
    try:
        host = urlsplit(origin).hostname or ""
    except ValueError:
        return False
    return settings.loopback_only and _is_loopback(host)


class BodyRefused(Exception):
    """The POST body cannot be read as sent; carries the HTTP status and the JSON-RPC error to answer."""

    def __init__(self, status: int, error: ProtocolError) -> None:
        super().__init__(error.message)
        self.status = status
        self.error = error


class _BodyDecoder:
    """Undoes one `Content-Encoding` (gzip or deflate, RFC 9110 §8.4.1) with a bound on the decoded size.

    aiohttp's own decompression is switched off (`create_runner`), so a body that is not what its
    header says, or a compression bomb, is answered here as JSON instead of by aiohttp in plain text.
    """

    def __init__(self, coding: str) -> None:
        self.coding = coding
        self._inflate: Any = None  # zlib's decompress object is untyped in typeshed's older stubs
        self._started = False

    def decode(self, chunk: bytes, budget_bytes: int) -> bytes:
        """Decoded bytes of `chunk`, at most `budget_bytes + 1` (one more than allowed signals "too large").

        Raises:
            zlib.error: the bytes are not of the declared coding.
        """
        if self.coding in ("", "identity"):
            return chunk
        if not self._started and chunk:
            self._started = True
            # gzip has its own header (wbits 31); deflate is meant to be zlib-wrapped, but some clients
            # send a raw stream: a zlib header has compression method 8 in its low nibble.
            wbits = 31 if self.coding in ("gzip", "x-gzip") else (15 if chunk[0] & 0x0F == 8 else -15)
            self._inflate = zlib.decompressobj(wbits=wbits)
        if self._inflate is None:
            return b""
        if self._inflate.eof:
            if chunk:  # bytes after the end of the stream (junk, or a second gzip member we do not take)
                raise zlib.error("data after the end of the compressed stream")
            return b""
        decoded = bytes(self._inflate.decompress(chunk, budget_bytes + 1))
        if self._inflate.eof and self._inflate.unused_data:
            raise zlib.error("data after the end of the compressed stream")
        return decoded

    def finish(self) -> bytes:
        """What is left once the body ended; raises `zlib.error` when the stream was cut short."""
        if self._inflate is None:
            return b""
        rest = bytes(self._inflate.flush())
        if not self._inflate.eof:
            raise zlib.error("the compressed stream ends early")
        return rest


def _too_large(limit: int) -> BodyRefused:
    return BodyRefused(413, InvalidRequest(f"Request body exceeds {limit} bytes; send less"))


async def _read_body(request: web.Request, limit: int, timeout_s: float) -> bytes:
    """The whole body after `Content-Encoding` is undone, within `limit` bytes and `timeout_s` seconds.

    The limit bounds both the bytes received and the bytes decoded (declared or actual, chunked or not),
    so a compressed body can neither expand past it nor stream input that decodes to nothing. One gzip
    member only: bytes after the end of the compressed stream are refused.

    Raises:
        BodyRefused: 415 for a content coding other than `gzip`, `deflate` or `identity`; 413 over the
            limit; 400 (-32700) when the body is not what its `Content-Encoding` says; 408 after the timeout.
    """
    coding = request.headers.get("Content-Encoding", "").strip().lower()
    if coding not in _CONTENT_CODINGS:
        raise BodyRefused(
            415,
            InvalidRequest(f"Content-Encoding {coding!r} is not supported; send gzip, deflate or an uncompressed body"),
        )
    # Each refusal is raised new, never kept in a local: an exception bound in this frame would form a
    # cycle with its traceback (which holds the frame and its chunks) and keep up to `limit` bytes alive
    # until the cyclic collector runs (bench.request_memory)
    if (request.content_length or 0) > limit:  # compressed or not: no body we take is larger
        raise _too_large(limit)
    decoder = _BodyDecoder(coding)
    chunks: list[bytes] = []
    size = 0
    received = 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.content.iter_any():
                received += len(chunk)
                if received > limit:  # also bounds input that decodes to nothing (empty deflate blocks)
                    raise _too_large(limit)
                decoded = decoder.decode(chunk, limit - size)
                size += len(decoded)
                if size > limit:
                    raise _too_large(limit)
                chunks.append(decoded)
        rest = decoder.finish()
    except TimeoutError as exc:
        raise BodyRefused(
            408, InvalidRequest(f"Request body not received within {timeout_s:g}s; send the whole body promptly")
        ) from exc
    except zlib.error as exc:
        raise BodyRefused(
            400, ParseError(f"Parse error: the body is not valid {coding} data, as its Content-Encoding header says")
        ) from exc
    if size + len(rest) > limit:
        raise _too_large(limit)
    chunks.append(rest)
    return b"".join(chunks)


def _capability_missing(exc: TaskError) -> ProtocolError:
    """-32021 naming the capability an input request needs (`elicitation.url` is asked for as `elicitation`)."""
    missing = cast(InputCapabilityMissing, exc)  # `_DOMAIN_ERRORS` calls this for that class only
    return MissingRequiredClientCapability(
        f"Missing client capability: {missing}", {missing.capability.split(".")[0]: {}}
    )


def _limit_reached(exc: TaskError) -> ProtocolError:
    reached = cast(LimitReached, exc)  # `_DOMAIN_ERRORS` calls this for that class only
    return TooManyRequests(str(reached), reached.limit, reached.maximum, reached.retry_after_ms)


_DOMAIN_ERRORS: Final[dict[type[TaskError], Callable[[TaskError], ProtocolError]]] = {
    TaskNotFound: lambda exc: InvalidParams("Failed to retrieve task: Task not found"),
    InvalidInputResponse: lambda exc: InvalidParams(f"Invalid params: {exc}"),
    InputCapabilityMissing: _capability_missing,
    UnstorableValue: lambda exc: InvalidParams(f"Invalid params: {exc}"),
    VersionConflict: lambda exc: ServiceUnavailable("The task is being changed concurrently; retry the request"),
    StoreUnavailable: lambda exc: ServiceUnavailable(f"The task store is unavailable ({exc}); retry the request"),
    LimitReached: _limit_reached,
}
"""Domain error → JSON-RPC error (CONVENTIONS.md §Errors): a foreign task is the same -32602 as a missing one.

Every `TaskError` a handler can meet is here (a unit test holds the list); the others (a lease, a
transition or a writer the gateway never attempts, a manifest read at start-up) would be a bug, -32603."""


def map_exception(exc: Exception) -> ProtocolError:
    """The one exception → JSON-RPC error mapper (CONVENTIONS.md §Errors).

    Protocol errors pass through; domain errors map by `_DOMAIN_ERRORS`; anything else is logged with
    its traceback and answered with a generic -32603.
    """
    if isinstance(exc, ProtocolError):
        return exc
    for kind, convert in _DOMAIN_ERRORS.items():
        if isinstance(exc, kind):
            if isinstance(exc, StoreUnavailable):
                logger.warning("task store unavailable: %s", exc)
            return convert(exc)
    logger.exception("unexpected error while handling a request", exc_info=exc)
    return InternalError("Internal error")


async def _admit(request: web.Request, services: Services) -> Identity | web.Response:
    """The caller of `request`, judged on its headers alone, or the response that refuses it.

    In order: `Origin`/`Host` (403); `Authorization` sent more than once with different values (400,
    -32020), before any credential is judged, as a proxy could authenticate another of the values; the
    bearer token (401 with `WWW-Authenticate`, 403 for a tenant its issuer may not vouch for, 503 when the
    issuer is down); a `tools/call` whose `Mcp-Name` tool needs scopes the caller lacks (403). Nothing of
    the body has been read, so an unauthenticated client cannot hold the server with a slow or large one.
    """
    if not _origin_allowed(request, services):
        return _error(None, InvalidRequest("Forbidden: Origin or Host is not allowed"), 403)
    try:
        refuse_repeated(request.headers, (constants.HEADER_AUTHORIZATION,))
    except HeaderMismatch as exc:
        response = _error(None, exc)
        response.force_close()  # the body was never read: do not reuse the connection
        return response
    identity = await identity_gate.authenticate(request)  # OIDC, ServiceAccount or static token
    if isinstance(identity, web.Response):
        return identity
    if request.headers.get(constants.HEADER_METHOD) == constants.METHOD_TOOLS_CALL:
        forbidden = identity_gate.refuse_scope(request, identity, request.headers.get(constants.HEADER_NAME))
        if forbidden is not None:
            return forbidden
    return identity


async def _receive(request: web.Request, settings: GatewaySettings) -> bytes | web.Response:
    """The body (`_read_body`), or the response that refuses it; a refused body closes the connection."""
    try:
        return await _read_body(request, settings.max_body_bytes, settings.body_read_timeout_s)
    except BodyRefused as refused:
        response = _error(None, refused.error, refused.status)
        response.force_close()  # do not keep reading a refused body on a kept-alive connection
        return response
    except ConnectionError:  # the client hung up mid-body: its business, and no one reads an answer
        logger.info(
            "client closed the connection before sending the whole request body (Content-Length %s)",
            request.content_length,
        )
        response = _error(None, InvalidRequest("Request body incomplete: the client closed the connection"), 400)
        response.force_close()
        return response


def _refusal(request_id: RequestId | None, error: ProtocolError) -> web.Response:
    """A JSON-RPC error as the modern era answers it: its own HTTP status, `Retry-After` on a 503 and on a
    429 that knows when a retry may succeed.
    """
    response = _error(request_id, error)
    retry_after_s = error.retry_after_s if isinstance(error, (ServiceUnavailable, TooManyRequests)) else None
    if retry_after_s is not None:
        response.headers["Retry-After"] = str(retry_after_s)
    return response


async def handle_post(request: web.Request) -> web.StreamResponse:
    """Serve one JSON-RPC message POSTed to the MCP endpoint.

    The caller is admitted on the headers (`_admit`), the body read within its limits (`_receive`), then
    the message is answered in its era (`_answer`). Every failure is a JSON response: a JSON-RPC error
    object with the id when one could be read.
    """
    services = request.app[SERVICES_KEY]
    identity = await _admit(request, services)
    if isinstance(identity, web.Response):
        return identity
    body = await _receive(request, services.settings)
    if isinstance(body, web.Response):
        return body
    return await _answer(request, body, identity, services)


async def _answer(request: web.Request, body: bytes, identity: Identity, services: Services) -> web.StreamResponse:
    """Parse `body` and answer it: a client's response to one of our input requests, or a message of its era.

    Strict UTF-8 JSON (-32700); a legacy client's reply to an input request goes to `legacy.accept_reply`;
    else one JSON-RPC message (-32600; array params or lone surrogates in params -32602); a `tools/call`
    of a tool whose scopes the caller lacks is 403 (a legacy client sends no `Mcp-Name`); then the era
    is chosen, once, and the message served in it.
    """
    request_id: RequestId | None = None
    try:
        payload = decode_body(body)
        if legacy.is_input_reply(payload):
            request[REQUEST_METHOD_KEY] = METHOD_LABEL_RESPONSE
            where = lone_surrogate_path(payload) if may_escape_surrogates(body) else None
            if where is not None:  # as parse_message refuses them in a request: nothing could store it
                raise InvalidParams(f"Invalid params: {where} holds a lone UTF-16 surrogate escape (\\ud800-\\udfff)")
            return await legacy.accept_reply(payload, identity.owner, services, request.headers)
        request_id = peek_request_id(payload)
        message = parse_message(payload, may_hold_surrogates=may_escape_surrogates(body))
        request[REQUEST_METHOD_KEY] = message.method
        if message.method == constants.METHOD_TOOLS_CALL:  # both eras; a legacy client sends no Mcp-Name
            forbidden = identity_gate.refuse_scope(request, identity, message.params.get("name"), request_id)
            if forbidden is not None:
                return forbidden
    except Exception as exc:  # the one top-level mapper
        return _refusal(request_id, map_exception(exc))
    if dispatch.era_of(request.headers, message) is Era.LEGACY:
        return await _serve_legacy(request, message, identity, services)
    return await _serve_modern(request, message, identity, services)


async def _serve_modern(
    request: web.Request, message: Message, identity: Identity, services: Services
) -> web.StreamResponse:
    """A 2026-07-28 message: a notification is accepted (202, no modern notification has a row); a request
    gets `_meta`/headers/version (-32602/-32020/-32022) → method (-32601/404) → tasks gate (-32021) →
    params (-32602) → handler. Errors carry their own HTTP status; a `tools/call` with a `progressToken`
    may answer on an SSE stream (`progress`), and an error after the stream opened ends it.
    """
    request_id = message.request_id
    if request_id is None:
        return web.Response(status=202)
    stream: progress.ProgressStream | None = None
    try:
        envelope = validate_envelope(
            request.headers, message, accept_missing_task_name=services.settings.accept_missing_name_header
        )
        found = dispatch.route(Era.MODERN, message.method)
        token = progress.progress_token(message.params) if found.reports_progress else None
        stream = None if token is None else progress.ProgressStream(request, token)
        answer = await found.serve(_modern_context(request, message, envelope, identity, services, stream))
    except Exception as exc:  # the one top-level mapper
        error = map_exception(exc)
        if stream is not None and stream.started:  # HTTP 200 is sent: the error ends the stream
            return await stream.respond(error_response(request_id, error))
        return _refusal(request_id, error)
    if isinstance(answer, web.StreamResponse):
        return answer
    if stream is not None:
        return await stream.respond(result_response(request_id, answer))
    return json_response(result_response(request_id, answer))


def _modern_context(
    request: web.Request,
    message: Message,
    envelope: RequestEnvelope,
    identity: Identity,
    services: Services,
    stream: progress.ProgressStream | None,
) -> RequestContext:
    """The context of a modern request whose envelope validated; a `tasks/*` request's log lines name its task."""
    task_id = message.params.get("taskId")
    if message.method in constants.TASK_METHODS and isinstance(task_id, str):
        bind_task(task_id[:64])
    return RequestContext(
        message,
        Era.MODERN,
        envelope,
        identity,
        request.headers,
        services,
        request,
        client_gone=client_gone(request),
        progress=None if stream is None else stream.report,
    )


async def _serve_legacy(
    request: web.Request, message: Message, identity: Identity, services: Services
) -> web.StreamResponse:
    """A legacy-era message (`legacy`): its `Mcp-Session-Id` must verify (404), except on `initialize`,
    which starts over; a notification runs its row, if any, and gets 202 (a failure is only logged); a
    request gets its result in `legacy_form`, or its error with HTTP 200 (a legacy client treats any
    other status as a transport failure), or the handler's own response (a streamed call, `initialize`).
    """
    session: str | None = None
    if message.method != constants.METHOD_INITIALIZE:  # initialize starts over, whatever it carries
        try:
            session = legacy.session_of(request.headers, identity.owner, services)
        except legacy.UnknownSession:
            return legacy.session_not_found(message.request_id)
    ctx = legacy.context(request, message, identity, services, session)
    request_id = message.request_id
    if request_id is None:
        found = dispatch.notification(Era.LEGACY, message.method)
        if found is not None:
            try:
                await found.serve(ctx)
            except Exception as exc:  # a notification gets no answer; a failure is only logged
                map_exception(exc)
        return web.Response(status=202)
    try:
        answer = await dispatch.route(Era.LEGACY, message.method).serve(ctx)
    except Exception as exc:  # the one top-level mapper
        return json_response(error_response(request_id, map_exception(exc)))
    if isinstance(answer, web.StreamResponse):
        return answer
    return json_response(result_response(request_id, legacy.legacy_form(answer)))


async def method_not_allowed(request: web.Request) -> web.Response:
    """GET and DELETE: there is no standalone SSE stream and no session to delete (405)."""
    return web.Response(status=405, headers={"Allow": "POST"}, text="Use POST: MCP 2026-07-28 is stateless")
