"""`worker.tls`: an HTTPS server on a real socket, its certificate renewed in place (issue 21 item 6)."""

from __future__ import annotations

import ssl
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from mcp_tasks.worker import tls
from tests.tls import issue


async def test_a_renewed_certificate_is_served_to_new_connections_after_a_refresh(tmp_path: Path) -> None:
    """Our own choice (docs/security.md): cert-manager renews the Secret, the kubelet updates the files, the
    served certificate follows without a restart; a half-written pair keeps the old one."""
    first = issue(["127.0.0.1"], "first CA")
    cert, key, _ = first.write(tmp_path / "files")
    first_ca = first.write(tmp_path / "first")[2]  # kept: the renewal below rewrites the served folder
    served = tls.ServedCertificate(cert, key)

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=served.context).start()
        url = f"https://127.0.0.1:{runner.addresses[0][1]}/healthz"
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session:
            async with session.get(url, ssl=tls.client_context(first_ca)) as answer:
                assert answer.status == 200
            assert not await served.refresh(), "unchanged files: nothing reloaded"

            second = issue(["127.0.0.1"], "second CA")
            key.write_bytes(b"not a key")  # a renewal caught half-written
            assert not await served.refresh()
            async with session.get(url, ssl=tls.client_context(first_ca)) as answer:
                assert answer.status == 200, "the previous certificate stays"

            second.write(tmp_path / "files")
            second_ca = second.write(tmp_path / "second")[2]
            assert await served.refresh()
            async with session.get(url, ssl=tls.client_context(second_ca)) as answer:
                assert answer.status == 200
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                async with session.get(url, ssl=tls.client_context(first_ca)):
                    pass
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                async with session.get(url, ssl=ssl.create_default_context()):
                    pass
    finally:
        await runner.cleanup()
