"""Per-request context handed to every method handler, and the services they share.

Built once per request by `transport` after the request was authenticated and its era chosen; a handler
gets it with its parsed params (`dispatch.Route`). A handler's caller is `ctx.identity`, a required
field: there is no context variable to forget to set, and no context without a caller.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final, TypeVar

from aiohttp import web

from mcp_tasks.gateway.identity.principal import Identity
from mcp_tasks.gateway.legacy_sessions import LiveCalls
from mcp_tasks.gateway.queued_messages import QueuedMessages
from mcp_tasks.gateway.rate_limits import PollPace, TokenBuckets
from mcp_tasks.gateway.settings import GatewaySettings
from mcp_tasks.protocol import constants
from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.protocol.headers import RequestEnvelope
from mcp_tasks.protocol.jsonrpc import Message
from mcp_tasks.tasks.interfaces import ArtifactStore, Clock, ProgressSink, TaskStore, ToolCatalog, ToolExecutor
from mcp_tasks.tasks.limits import LimitSettings
from mcp_tasks.tasks.owner import Owner


@dataclass(frozen=True, slots=True)
class Services:
    """What the gateway talks to; it never knows which deployment provides them (ARCHITECTURE.md).

    `live_calls` lists the legacy-era calls whose streams this replica has open (it lives and dies with
    them; `legacy_sessions.LiveCalls`), so a cancel of a call without a session can reach it.
    """

    store: TaskStore
    catalog: ToolCatalog
    artifacts: ArtifactStore
    executor: ToolExecutor
    clock: Clock
    settings: GatewaySettings
    live_calls: LiveCalls = field(default_factory=LiveCalls)
    limits: LimitSettings = field(default_factory=LimitSettings)
    """Quotas and rates of task creation (`admission.admit_creation`); the executor applies the running budgets."""
    rate_limits: TokenBuckets = field(init=False)
    """This replica's token buckets of task creation, sized by `limits.rate_limit_max_keys`."""
    poll_pace: PollPace = field(default_factory=PollPace)
    queued_messages: QueuedMessages = field(default_factory=QueuedMessages)
    """Queued tasks' last `statusMessage`, reused for reads sooner than their `pollIntervalMs`."""
    """When each task was last read here (`mcptasks_fast_polls_total`)."""
    quota_locks: tuple[asyncio.Lock, ...] = field(default_factory=lambda: tuple(asyncio.Lock() for _ in range(64)))
    """Striped by principal: a quota's count and the create it admits hold one (`admission.admit_creation`)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "rate_limits", TokenBuckets(self.limits.rate_limit_max_keys))


class Era(StrEnum):
    """The protocol era a request speaks, chosen once per request at the entry (`dispatch.era_of`).

    `MODERN`: MCP 2026-07-28, stateless, `_meta` on every request. `LEGACY`: 2025-11-25 and older,
    `initialize` first, served without a session store (`legacy`).
    """

    MODERN = "2026-07-28"
    LEGACY = "2025-11-25"


def _never_gone() -> bool:
    return False


def client_gone(request: web.Request) -> Callable[[], bool]:
    """A probe that is true once the client closed the connection `request` came on."""

    def gone() -> bool:
        transport = request.transport
        return transport is None or transport.is_closing()

    return gone


@dataclass(frozen=True, slots=True)
class RequestContext:
    """One validated request: its message, era, `_meta` envelope, authenticated caller and headers.

    `identity` is the caller `gate.authenticate` established for this request, passed explicitly to every
    handler (its `owner` owns the tasks the request creates or reads; its scopes select the tools it sees).
    `era` is the request's protocol era; a legacy-era request has an envelope that declares nothing
    (its capabilities were said in `initialize`, which the server does not keep). `request` is the POST
    itself, for the handlers that answer on a stream of their own. `session` is the nonce of a legacy-era
    request's verified `Mcp-Session-Id` (`legacy.session_of`), `None` without one and in the modern era.

    `client_gone()` tells whether the client has closed the connection this request came on (a
    synchronous call then stops its tool instead of running it for nobody). `progress`, set when the
    request carried a `progressToken`, sends a synchronous run's progress to this request's stream.
    """

    message: Message
    era: Era
    envelope: RequestEnvelope
    identity: Identity
    headers: Mapping[str, str]
    services: Services
    request: web.Request
    session: str | None = None
    client_gone: Callable[[], bool] = field(default=_never_gone)
    progress: ProgressSink | None = None

    @property
    def owner(self) -> Owner:
        """The principal that owns the tasks this request creates or reads (`identity.owner`)."""
        return self.identity.owner

    @property
    def params(self) -> JsonObject:
        """The request's `params` object."""
        return self.message.params

    def server_meta(self) -> JsonObject:
        """`{"io.modelcontextprotocol/serverInfo": {name, version}}` for a result's `_meta`."""
        settings = self.services.settings
        return {constants.META_SERVER_INFO: {"name": settings.server_name, "version": settings.server_version}}

    def complete(self, result: JsonObject) -> JsonObject:
        """Stamp `resultType` (default `complete`) and serverInfo `_meta` on a result (MCP 2026-07-28 §Result)."""
        result.setdefault("resultType", constants.RESULT_TYPE_COMPLETE)
        meta = result.get("_meta")
        result["_meta"] = {**meta, **self.server_meta()} if isinstance(meta, dict) else self.server_meta()
        return result


class ClientGone(Exception):
    """The client closed the connection while its call waited; what it waited for was cancelled."""


CLIENT_GONE_POLL_S: Final = 0.25
"""How often a waiting call checks that its client is still connected, in seconds."""

T = TypeVar("T")


async def unless_client_gone(ctx: RequestContext, work: Awaitable[T]) -> T:
    """Await `work`, cancelling it once the client has closed the connection (or this handler is cancelled).

    Raises:
        ClientGone: the client left first; `work` was cancelled, nobody will read its outcome.
    """
    task = asyncio.ensure_future(work)
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=CLIENT_GONE_POLL_S)
            if not task.done() and ctx.client_gone():
                raise ClientGone()
        return task.result()
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
