"""The Kubernetes API edge: every request to the API server goes through here, bounded and mapped.

Who calls it: the Kubernetes store, catalog and watch, the operator and `cli`. Nothing else in
`mcp_tasks` calls a kubernetes_asyncio API method or sees its `ApiException`.

- `Apis(api_client)` holds the generated API groups (`core`, `batch`, `apps`, `autoscaling`,
  `objects`, `auth`, `events`, `coordination`); their methods are only ever passed to the functions below.
- `call(fn, *args, timeout_s=...)` makes one request: it passes `_request_timeout` (so the HTTP
  client gives up) and bounds the whole call with `asyncio.timeout` (so nothing else can hang it).
  `call_json` does the same and answers the raw JSON body (no model objects: Job and pod lists are large).
- `watch(fn, *args, server_timeout_s=...)` opens one WATCH (an async context manager over its
  events): the server ends it after `timeoutSeconds`, the client gives up when no byte arrived for
  longer than that (a read timeout, not a total deadline, which would cut healthy streams), and the
  response headers are bounded like a call.
- Errors, in one table (`_error`): an error answer becomes an `ApiError` subclass by status (404
  `NotFound`, 409 `Conflict`, 410 `Gone`, 422 `Invalid`, else `ApiError`); a 429 or 5xx answer, a
  timeout or a lost connection becomes the domain's `StoreUnavailable` (retry later). Each is chained
  to the library's exception with `from`.

Opening: kubernetes_asyncio creates its aiohttp session with `trust_env=True`, so aiohttp looks up
`~/.netrc` in a worker thread on *every* request (two thread hops per API call; the Kubernetes
benchmark measured about 0.6 ms per task create). The API server is reached with a bearer token or
client certificate, never netrc; `open_api_client` turns that lookup off unless a proxy is configured
through the environment (`HTTP(S)_PROXY`), which `trust_env` is also what honours.

TCP keepalive: a WATCH waits for the server without sending anything, so a connection whose packets are
dropped (a network partition, a firewall, an API server host that vanished) would look like a quiet
watch until the read timeout (`timeoutSeconds` + 30 s, minutes). `open_api_client` makes every socket
of the client send keepalive probes after `KEEPALIVE_IDLE_S` of silence, so the kernel ends such a
connection within about `KEEPALIVE_IDLE_S + KEEPALIVE_PROBES * KEEPALIVE_INTERVAL_S` seconds; the watch
then fails and reconnects, and readiness says the API server is unreachable (`watch.Reflector`).

Closing: the session talks TLS; `close()` starts closing those transports and an SSL transport needs a
few more loop iterations to finish (aiohttp's "graceful shutdown"). Stopping the loop right after
`close()` leaves them to the garbage collector, which warns about unclosed transports.
`close_api_client` waits a moment for them.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, Final

import aiohttp
from aiohttp.connector import AddrInfoType
from kubernetes_asyncio.client import (
    ApiClient,
    AppsV1Api,
    AuthenticationV1Api,
    AutoscalingV2Api,
    BatchV1Api,
    Configuration,
    CoordinationV1Api,
    CoreV1Api,
    CustomObjectsApi,
    EventsV1Api,
)
from kubernetes_asyncio.client.exceptions import ApiException

from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.tasks.errors import StoreUnavailable

TLS_CLOSE_GRACE_S: Final = 0.1
DEFAULT_TIMEOUT_S: Final = 20.0
"""Longest one API request may take by default, in seconds (connect, send, answer, read)."""
WATCH_READ_GRACE_S: Final = 30.0
"""How much longer than its `timeoutSeconds` a WATCH may stay silent before it is given up, in seconds."""
MESSAGE_LIMIT: Final = 300
"""Characters of the API server's message kept in an `ApiError`."""

KEEPALIVE_IDLE_S: Final = 3
"""Seconds of silence on an API connection before the kernel sends the first TCP keepalive probe."""
KEEPALIVE_INTERVAL_S: Final = 1
"""Seconds between unanswered TCP keepalive probes."""
KEEPALIVE_PROBES: Final = 3
"""Unanswered probes after which the kernel ends the connection (the read fails with a connection error)."""

PROXY_VARIABLES: Final = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")

ApiMethod = Callable[..., Awaitable[Any]]
"""A method of a generated kubernetes_asyncio API group (`Apis`), e.g. `apis.core.read_namespaced_pod`."""


class ApiError(Exception):
    """The API server refused a request (an error answer that retrying as it is would not change).

    Attributes:
        status: the HTTP status (0: the client refused to build the request).
        reason: the HTTP reason phrase.
        message: the API server's `Status.message`, when it sent one.
    """

    def __init__(self, status: int, reason: str, message: str = "") -> None:
        super().__init__(status, reason, message)
        self.status = status
        self.reason = reason
        self.message = message

    def __str__(self) -> str:
        """`<status> <reason>: <the API server's message>`."""
        return f"{self.status} {self.reason}" + (f": {self.message}" if self.message else "")


class NotFound(ApiError):
    """404: the object (or its kind: a CRD that is not installed) does not exist."""


class Conflict(ApiError):
    """409: the object already exists, or changed since the `resourceVersion` the request carried."""


class Gone(ApiError):
    """410: the `resourceVersion` a LIST continuation or a WATCH resumes from is no longer in the history."""


class Invalid(ApiError):
    """422: the object failed validation (the CRD schema, or a field the API server refuses)."""


_REFUSALS: Final[dict[int, type[ApiError]]] = {404: NotFound, 409: Conflict, 410: Gone, 422: Invalid}


def _message(body: object) -> str:
    """The `message` of a Kubernetes `Status` body (bytes, text or parsed JSON), or its first characters."""
    if isinstance(body, bytes):
        body = body.decode(errors="replace")
    if isinstance(body, str):
        text = body
        try:
            body = json.loads(text)
        except ValueError:
            return text[:MESSAGE_LIMIT]
    if isinstance(body, dict):
        return str(body.get("message") or "")[:MESSAGE_LIMIT]
    return ""


def _error(status: int, reason: str, body: object = None) -> Exception:
    """The one table: what an error answer (`status`, `reason`, its `Status` body) means to a caller."""
    if status == 429 or status >= 500:
        return StoreUnavailable(f"the Kubernetes API server answered {status} {reason}; retry later")
    return _REFUSALS.get(status, ApiError)(status, reason, _message(body))


def _unavailable(exc: BaseException) -> StoreUnavailable:
    return StoreUnavailable(f"the Kubernetes API server did not answer ({type(exc).__name__}); retry later")


class Apis:
    """The generated API groups over one `ApiClient`; their methods go to `call`, `call_json` or `watch`."""

    __slots__ = ("api_client", "apps", "auth", "autoscaling", "batch", "coordination", "core", "events", "objects")

    def __init__(self, api_client: ApiClient) -> None:
        self.api_client = api_client
        self.core = CoreV1Api(api_client)
        self.batch = BatchV1Api(api_client)
        self.apps = AppsV1Api(api_client)
        self.autoscaling = AutoscalingV2Api(api_client)
        self.objects = CustomObjectsApi(api_client)
        self.auth = AuthenticationV1Api(api_client)
        self.events = EventsV1Api(api_client)
        self.coordination = CoordinationV1Api(api_client)


@contextlib.contextmanager
def _mapped_errors() -> Iterator[None]:
    """Turn what the client library raises into this edge's errors: an `ApiException` by the one table
    (`_error`), a timeout or a lost connection into `StoreUnavailable`.
    """
    try:
        yield
    except ApiException as exc:
        raise _error(exc.status or 0, str(exc.reason or ""), exc.body) from exc
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        raise _unavailable(exc) from exc


async def _raise_for_status(response: Any, highest_ok: int) -> None:
    """Raise the mapped error of a raw answer whose status is not in `200..highest_ok`."""
    if not 200 <= response.status <= highest_ok:
        raise _error(response.status, str(response.reason or ""), await response.text())


async def call(fn: ApiMethod, *args: Any, timeout_s: float = DEFAULT_TIMEOUT_S, **kwargs: Any) -> Any:
    """Make one API request, `fn(*args, **kwargs)`, within `timeout_s` seconds.

    Args:
        fn: a method of an `Apis` group.
        *args: its positional arguments.
        timeout_s: deadline of the whole request, in seconds.
        **kwargs: its keyword arguments (not `_request_timeout`: that is `timeout_s`).

    Returns:
        What `fn` answers: a model object, or a dict for custom objects.

    Raises:
        NotFound, Conflict, Gone, Invalid, ApiError: an error answer (404, 409, 410, 422, any other 4xx).
        StoreUnavailable: no answer within `timeout_s`, no connection, or a 429/5xx answer.
    """
    with _mapped_errors():
        async with asyncio.timeout(timeout_s):
            return await fn(*args, _request_timeout=timeout_s, **kwargs)


async def call_json(fn: ApiMethod, *args: Any, timeout_s: float = DEFAULT_TIMEOUT_S, **kwargs: Any) -> JsonObject:
    """`call`, answered as the plain JSON body (`_preload_content=False`: no model objects are built).

    Raises:
        NotFound, Conflict, Gone, Invalid, ApiError: an error answer (see `call`).
        StoreUnavailable: no answer within `timeout_s`, no connection, or a 429/5xx answer.
    """
    with _mapped_errors():
        async with asyncio.timeout(timeout_s):
            response: Any = await fn(*args, _preload_content=False, _request_timeout=timeout_s, **kwargs)
            try:
                await _raise_for_status(response, 299)
                body: JsonObject = await response.json()
                return body
            finally:
                response.release()


class WatchStream:
    """The events (`{"type", "object"}`) of one open WATCH, in server order, as an async iterator.

    Iteration ends when the server ends the stream (its `timeoutSeconds`).

    Raises (from iteration):
        Gone: a 410 `ERROR` event: the `resourceVersion` is too old; list again.
        NotFound, Conflict, Invalid, ApiError: another `ERROR` event.
        StoreUnavailable: no byte within the read timeout, or a lost connection.
    """

    def __init__(self, response: Any) -> None:
        self._response = response
        self._buffer = b""
        self._lines: collections.deque[bytes] = collections.deque()

    def __aiter__(self) -> WatchStream:
        return self

    async def __anext__(self) -> JsonObject:
        while True:
            while self._lines:
                line = self._lines.popleft()
                if not line.strip():
                    continue
                event: JsonObject = json.loads(line)
                if event.get("type") == "ERROR":
                    status: JsonObject = event.get("object") or {}
                    raise _error(int(status.get("code") or 0), str(status.get("reason") or "watch error"), status)
                return event
            try:
                chunk: bytes = await self._response.content.readany()
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                raise _unavailable(exc) from exc
            if not chunk:
                raise StopAsyncIteration
            self._buffer += chunk
            *lines, self._buffer = self._buffer.split(b"\n")
            self._lines.extend(lines)


@contextlib.asynccontextmanager
async def watch(
    fn: ApiMethod,
    *args: Any,
    server_timeout_s: int,
    connect_timeout_s: float = DEFAULT_TIMEOUT_S,
    **kwargs: Any,
) -> AsyncIterator[WatchStream]:
    """Open one WATCH made with the list method `fn`; the block iterates its events (`WatchStream`).

    The block is entered once the API server answered the request (the watch is established); leaving
    it releases the connection.

    Args:
        fn: a list method of an `Apis` group (`watch=True` is added).
        *args: its positional arguments (group, version, namespace, plural for custom objects).
        **kwargs: its keyword arguments (e.g. `resource_version`, `allow_watch_bookmarks`, `label_selector`).
        server_timeout_s: the WATCH's `timeoutSeconds`: the server ends the stream after it, in seconds;
            the client gives up when no byte came for `server_timeout_s + WATCH_READ_GRACE_S` seconds.
        connect_timeout_s: deadline for connecting and for the response headers, in seconds.

    Raises:
        Gone: the `resourceVersion` is too old (410): list again.
        NotFound, Conflict, Invalid, ApiError: another error answer.
        StoreUnavailable: no answer within `connect_timeout_s`, no connection, or a 429/5xx answer.
    """
    read = aiohttp.ClientTimeout(
        total=None,
        connect=connect_timeout_s,
        sock_connect=connect_timeout_s,
        sock_read=server_timeout_s + WATCH_READ_GRACE_S,
    )
    with _mapped_errors():
        async with asyncio.timeout(connect_timeout_s):
            response: Any = await fn(
                *args,
                watch=True,
                timeout_seconds=server_timeout_s,
                _preload_content=False,
                _request_timeout=read,
                **kwargs,
            )
            try:
                await _raise_for_status(response, 200)
            except BaseException:
                response.release()
                raise
    try:
        yield WatchStream(response)
    finally:
        response.release()


def keepalive_socket(addr_info: AddrInfoType) -> socket.socket:
    """A TCP socket for `addr_info` (a `getaddrinfo` entry) that sends keepalive probes (module docstring).

    The probe timing (`KEEPALIVE_*`) is set where the platform has the options (Linux, macOS); elsewhere
    only `SO_KEEPALIVE`, with the system's timing.

    Raises:
        OSError: the socket could not be created.
    """
    family, type_, proto, _, _ = addr_info
    sock = socket.socket(family=family, type=type_, proto=proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for option, value in (
            ("TCP_KEEPIDLE", KEEPALIVE_IDLE_S),
            ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL_S),
            ("TCP_KEEPCNT", KEEPALIVE_PROBES),
        ):
            if hasattr(socket, option):
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)
    except BaseException:
        sock.close()
        raise
    return sock


def open_api_client(configuration: Configuration) -> ApiClient:
    """An `ApiClient` for `configuration` whose connections send TCP keepalive probes (`keepalive_socket`),
    without per-request netrc lookups when no proxy is configured (module docstring).
    """
    api_client = ApiClient(configuration)
    session = api_client.rest_client.pool_manager
    # kubernetes_asyncio builds its TCPConnector itself and takes no socket factory: set the connector's
    # (the attribute its `socket_factory` argument fills, read at each connection).
    if isinstance(session.connector, aiohttp.TCPConnector):
        session.connector._socket_factory = keepalive_socket
    if not any(os.environ.get(name) for name in PROXY_VARIABLES):
        session._trust_env = False  # aiohttp has no setter; see the module docstring
    return api_client


async def close_api_client(api_client: ApiClient) -> None:
    """Close `api_client` and give its TLS connections `TLS_CLOSE_GRACE_S` seconds to finish closing."""
    await api_client.close()
    await asyncio.sleep(TLS_CLOSE_GRACE_S)
