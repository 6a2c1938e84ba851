"""`worker.tls`: an HTTPS server on a real socket, its certificate renewed in place; the TLS settings' checks
(issue 21 item 6)."""

from __future__ import annotations

import ssl
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from mcp_tasks.cli.settings import ServeSettings, Settings, SettingsError, validate
from mcp_tasks.operator.settings import OperatorSettings
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


def test_a_worker_certificate_needs_its_key_and_an_https_worker_url(tmp_path: Path) -> None:
    """Our own choice (docs/configuration.md): bad TLS settings fail at start-up, naming the variable."""
    cert, key, _ = issue(["127.0.0.1"]).write(tmp_path / "tls")
    base = Settings(serve=ServeSettings(data_dir=tmp_path, port=0))

    def operator(**tls_settings: Any) -> Settings:
        return replace(base, operator=OperatorSettings(**tls_settings))

    with pytest.raises(SettingsError, match="MCPTASKS_WORKER_TLS_KEY_FILE"):
        validate(operator(worker_tls_cert_file=cert), "operator")
    with pytest.raises(SettingsError, match="is not a file"):
        validate(operator(worker_tls_cert_file=cert, worker_tls_key_file=tmp_path / "absent.key"), "operator")
    with pytest.raises(SettingsError, match="must be https"):
        validate(operator(worker_tls_cert_file=cert, worker_tls_key_file=key, worker_url="http://op:8081"), "operator")
    served = validate(operator(worker_tls_cert_file=cert, worker_tls_key_file=key), "operator")
    assert served.operator.pod_worker_url == "https://127.0.0.1:8081"
    assert validate(base, "operator").operator.pod_worker_url == "http://127.0.0.1:8081", "no certificate: as before"
