"""The `/metrics` endpoint (Prometheus text format) each component serves on its own port."""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest


async def _metrics(request: web.Request) -> web.Response:
    response = web.Response(body=generate_latest(REGISTRY))
    response.headers["Content-Type"] = CONTENT_TYPE_LATEST
    return response


def metrics_app() -> web.Application:
    """An application with `GET /metrics` only (no MCP, no authentication: bind it where scrapers reach)."""
    app = web.Application()
    app.router.add_get("/metrics", _metrics)
    return app


async def start_metrics_server(host: str, port: int) -> tuple[web.AppRunner, int]:
    """Serve `/metrics` on `host:port` (0 picks a free port); return the runner and the bound port."""
    runner = web.AppRunner(metrics_app(), access_log=None, shutdown_timeout=1)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    bound = int(runner.addresses[0][1])
    return runner, bound
