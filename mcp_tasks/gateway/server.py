"""The HTTP/1.1 server below the gateway app: malformed HTTP is answered by us, as JSON, not by aiohttp's parser.

aiohttp's parser refuses some requests before any route, middleware or handler sees them: a request line
or header line over 8190 bytes, more than 128 headers, a request line that is not HTTP (which is what the
bytes after a body longer than its `Content-Length` become: the next request on the connection), broken
chunked framing. Left to aiohttp, each gets a `text/plain` 400 that quotes the bytes sent, an ERROR log
line with a traceback, and a reference cycle (the exception's traceback holds the frame that holds the
bytes read) that only the cyclic garbage collector frees, so memory grows with every such request.

aiohttp has no hook for this (aio-libs/aiohttp#3287 is open; middlewares and `on_response_prepare` never
see these requests), so `GatewayRunner` serves each connection with `_Connection`, a `RequestHandler`
whose `handle_error` (the method aiohttp calls for every such error, and for a handler that raised) answers
a short JSON-RPC error that quotes nothing, closes the connection, drops the exception's traceback and
logs one DEBUG line naming only the kind of defect. The parser itself, its limits and everything else
aiohttp does per connection are unchanged.

Used by `app.create_runner` only. Never echo a client's bytes or log them above DEBUG.
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage, BadStatusLine, HttpProcessingError, LineTooLong

from mcp_tasks.gateway.responses import json_response
from mcp_tasks.protocol.errors import InternalError, InvalidRequest, ProtocolError
from mcp_tasks.protocol.jsonrpc import error_response

logger = logging.getLogger("mcp_tasks.gateway")

MAX_LINE_BYTES = 8190
"""Longest request line and header line aiohttp's parser takes, in bytes (its default, about nginx's 8 KiB).
A longer one is refused as malformed HTTP."""

MAX_HEADERS = 128
"""Most header lines in one request (aiohttp's default). More is refused as malformed HTTP."""


def _describe(exc: HttpProcessingError) -> str:
    """What is wrong with the request, in our words: never the parser's message, which quotes the bytes."""
    if isinstance(exc, LineTooLong):
        return f"the request line or a header line is longer than {MAX_LINE_BYTES} bytes; send shorter headers"
    if isinstance(exc, BadStatusLine):
        return (
            "the request line is not HTTP/1.1 (after a body longer than its Content-Length, the rest is read "
            "as the next request); send Content-Length equal to the body's length"
        )
    if isinstance(exc, BadHttpMessage) and exc.message == "Too many headers received":  # aiohttp's own constant
        return f"the request has more than {MAX_HEADERS} header lines; send fewer"
    return "the request's head or its chunked body framing is not valid HTTP/1.1"


def _drop_tracebacks(exc: BaseException, connection: web.RequestHandler) -> None:
    """Break the reference cycles of `exc` and of the parser errors queued behind it on `connection`.

    A parser error's traceback holds the frame of aiohttp's `data_received`, whose locals hold the bytes
    read (up to 256 KiB a read) and the error itself: without this, each malformed request leaves that
    much for the cyclic garbage collector. After its first error the parser refuses every later read
    again, and those errors queue behind the first; none is answered, as the connection closes. The
    queue is aiohttp's private `_messages` deque of `(message, payload)` pairs, read defensively: if a
    later aiohttp renames it, only the queued errors' memory waits for the collector.
    """
    exc.__traceback__ = None
    for message, _payload in getattr(connection, "_messages", ()):
        queued = getattr(message, "exc", None)
        if isinstance(queued, BaseException):
            queued.__traceback__ = None


class _Connection(web.RequestHandler):
    """One client connection: aiohttp's `RequestHandler`, but its errors are answered as JSON-RPC errors."""

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """The response to a request aiohttp could not hand to the app, or whose handler raised.

        `message` (aiohttp's text, which quotes the client's bytes) is never used. Malformed HTTP is
        400 with -32600 and `id: null`, logged at DEBUG; anything else keeps aiohttp's ERROR log and
        gets `status` (500, or 504 for a handler timeout) with a generic -32603. The connection is
        closed either way: where the next request would start is unknown.

        Raises:
            ConnectionError: part of a response is sent already (as aiohttp: only closing is left).
        """
        if request.writer.output_size > 0:
            raise ConnectionError("Response is sent already, cannot send another response with the error message")
        error: ProtocolError
        if isinstance(exc, HttpProcessingError):
            self.close()  # accept no further pipelined request on this connection
            _drop_tracebacks(exc, self)
            logger.debug("malformed HTTP from a client refused (%s)", type(exc).__name__)
            error, status = InvalidRequest(f"Bad Request: {_describe(exc)}"), 400
        elif isinstance(exc, ConnectionError):  # the client hung up: nobody reads an answer
            logger.debug("client closed the connection before it was answered")
            error = InternalError("Internal error")
        else:
            self.log_exception("Error handling request from %s", request.remote, exc_info=exc)
            error = InternalError("Internal error")
        response = json_response(error_response(None, error), status)
        response.force_close()
        return response


class _Server(web.Server):
    """aiohttp's low-level server, making `_Connection`s (the one part of `web.Server` it changes)."""

    def __call__(self) -> web.RequestHandler:
        """A handler for one new connection (what the event loop calls as the protocol factory)."""
        return _Connection(self, loop=self._loop, **self._kwargs)


class GatewayRunner(web.AppRunner):
    """`web.AppRunner` whose connections answer malformed HTTP as JSON (`_Connection`).

    Takes `web.AppRunner`'s arguments; its `Server` is aiohttp's, remade as `_Server` with the same
    handler, request factory and keyword arguments once the app has started.
    """

    async def _make_server(self) -> web.Server:
        made = await super()._make_server()  # starts the app and builds aiohttp's Server
        return _Server(
            made.request_handler,
            request_factory=made.request_factory,
            handler_cancellation=made.handler_cancellation,
            loop=asyncio.get_running_loop(),
            **made._kwargs,  # aiohttp's own keyword arguments for each RequestHandler, as it built them
        )
