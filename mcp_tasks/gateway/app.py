"""The aiohttp application of the gateway: routes, shared services, and their lifecycle.

`create_app` wires the `TaskStore`, `ToolCatalog`, `ArtifactStore` and `ToolExecutor` it is given;
it creates nothing deployment-specific (cli does). Stateless across requests: any replica answers any
task. `/healthz` answers 200 once the app is serving (liveness: a lost API server never restarts a
gateway); `/readyz` answers 200 while the deployment's `readiness` check holds (the Kubernetes gateway:
its McpTask and McpTool caches are synced and watched, and the API server was reachable within the last
seconds, `store.kubernetes.watch.UNREACHABLE_AFTER_S`), else 503 with the reason.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

from aiohttp import web
from aiohttp.typedefs import Handler

from mcp_tasks.gateway import dispatch, listen, responses, server, transport
from mcp_tasks.gateway.auth import Authenticator
from mcp_tasks.gateway.context import Services
from mcp_tasks.gateway.identity import gate as identity_gate
from mcp_tasks.observability import metrics

MCP_PATH = "/mcp"


READINESS_KEY: web.AppKey[Callable[[], str | None]] = web.AppKey("readiness")
"""Why the gateway cannot serve now (a short sentence, never a secret), or None when it can."""


async def _healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def _readyz(request: web.Request) -> web.Response:
    reason = request.app[READINESS_KEY]()
    if reason is None:
        return web.json_response({"status": "ready"})
    return web.json_response({"status": "not ready", "reason": reason}, status=503)


_METERED_METHODS: Final = frozenset({*dispatch.METHODS, responses.METHOD_LABEL_RESPONSE})
"""The `method` label's values: what some era serves, and a client's response to an input request."""


@web.middleware
async def _metered(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Count every MCP POST by method and outcome, and time the ones answered in one piece."""
    if request.path != MCP_PATH or request.method != "POST":
        return await handler(request)
    started = time.perf_counter()
    response = await handler(request)
    method = metrics.method_label(request.get(responses.REQUEST_METHOD_KEY), _METERED_METHODS)
    code = response.get(responses.RESPONSE_CODE_KEY) or ("ok" if response.status < 400 else f"http_{response.status}")
    counted, timed = _request_series(method, code)
    counted.inc()
    if isinstance(response, web.Response):  # a stream's life is not a latency
        timed.observe(time.perf_counter() - started)
    return response


@functools.cache
def _request_series(method: str, code: str) -> tuple[Any, Any]:
    """The labelled children of the request metrics (bounded labels, so cached: no lookup per request)."""
    return metrics.REQUESTS.labels(method, code), metrics.REQUEST_SECONDS.labels(method)


def create_runner(app: web.Application, *, shutdown_timeout_s: float, lingering_time_s: float) -> web.AppRunner:
    """The `AppRunner` every gateway is served by (`mcptasks serve`, `mcptasks gateway`, the tests).

    Malformed HTTP (a line over `server.MAX_LINE_BYTES`, more than `server.MAX_HEADERS` headers, bytes
    after a body longer than its `Content-Length`) gets a short JSON-RPC error that quotes nothing, and
    the connection is closed (`server.GatewayRunner`). aiohttp's request decompression is off: the
    transport undoes `Content-Encoding` itself, bounded by the body limit, so a body that lies about its
    coding gets a JSON error instead of aiohttp's plain text, and a compression bomb stops at the limit.
    No access log (requests are logged at DEBUG). A connection that sends no complete request head, or
    idles between requests, is closed after `idle_timeout_s`.
    """
    return server.GatewayRunner(
        app,
        access_log=None,
        shutdown_timeout=shutdown_timeout_s,
        lingering_time=lingering_time_s,
        auto_decompress=False,
        keepalive_timeout=app[transport.SERVICES_KEY].settings.idle_timeout_s,
        max_line_size=server.MAX_LINE_BYTES,
        max_field_size=server.MAX_LINE_BYTES,
        max_headers=server.MAX_HEADERS,
    )


def create_app(
    services: Services,
    authenticator: Authenticator | identity_gate.Gate,
    lifecycle: Callable[[web.Application], AsyncIterator[None]] | None = None,
    readiness: Callable[[], str | None] | None = None,
) -> web.Application:
    """Build the gateway application.

    Args:
        services: store, catalog, artifacts, executor, clock and settings.
        authenticator: maps request headers to an `Owner`: an `identity_gate.Gate` (OIDC, ServiceAccount
            and static tokens), or one `Authenticator` (static tokens, or the local principal).
        lifecycle: optional `cleanup_ctx` generator that opens and closes what `services` depend on.
        readiness: what `GET /readyz` reports: None when ready, else why not in a short sentence (no
            secret: the probe is unauthenticated); 503 with `{"status": "not ready", "reason": ...}`.
            Called on every probe, so it must be cheap (no I/O). Default: always ready once serving.
    """
    app = web.Application(client_max_size=services.settings.max_body_bytes, middlewares=[_metered])
    app[transport.SERVICES_KEY] = services
    if not isinstance(authenticator, identity_gate.Gate):
        app[transport.AUTHENTICATOR_KEY] = authenticator
    gate = identity_gate.gate_for(authenticator, services.settings.server_name, MCP_PATH)
    identity_gate.install(app, gate, services.catalog)
    app[listen.SHUTDOWN_KEY] = asyncio.Event()
    app[READINESS_KEY] = readiness or (lambda: None)
    if lifecycle is not None:
        app.cleanup_ctx.append(lifecycle)

    async def end_subscriptions(app: web.Application) -> None:
        app[listen.SHUTDOWN_KEY].set()

    app.on_shutdown.append(end_subscriptions)
    app.router.add_post(MCP_PATH, transport.handle_post)
    app.router.add_get(MCP_PATH, transport.method_not_allowed)
    app.router.add_delete(MCP_PATH, transport.method_not_allowed)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    return app
