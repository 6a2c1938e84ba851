"""A warm worker serving HTTPS (issue 21 item 6): a real worker process of a test tool, real TLS sockets.

Our choice (docs/security.md, "TLS inside the cluster"): with `MCPTASKS_SERVE_TLS_CERT_FILE` and `_KEY_FILE`
the worker serves only HTTPS; a caller that verifies the CA and the certificate's name runs calls; a caller
whose TLS connection ends mid-call has its call stopped, as over plain HTTP (the worker peeks below TLS).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import aiohttp
import pytest

from mcp_tasks.runtime import contract
from mcp_tasks.worker import tls
from mcp_tasks.worker.warm_auth import WarmCallSigner, new_private_pem
from tests.conftest import REPO, until
from tests.controlplane.cluster import free_port
from tests.tls import issue
from tests.warm_attacks import CALLER, bearer, call_body

TOOL = "warm_sleeper"
NAME = "mcp-tasks-warm-worker"


async def test_a_warm_worker_over_tls_runs_verified_calls_and_stops_one_whose_caller_left(tmp_path: Path) -> None:
    cert, key, ca = issue([NAME]).write(tmp_path / "tls")
    signer = WarmCallSigner.from_pem(new_private_pem())
    port = free_port()
    environment = {
        **os.environ,
        contract.ENV_SERVE_PORT: str(port),
        contract.ENV_SERVE_HOST: "127.0.0.1",
        contract.ENV_SERVE_TOOL: TOOL,
        contract.ENV_SERVE_CALL_KEY: signer.public_pem,
        contract.ENV_SERVE_TLS_CERT_FILE: str(cert),
        contract.ENV_SERVE_TLS_KEY_FILE: str(key),
    }
    worker = await asyncio.create_subprocess_exec(
        sys.executable, "tools.py", TOOL, cwd=REPO / "tests" / "tools", env=environment
    )
    peer = tls.PeerTls(tls.client_context(ca), NAME)
    base_url = tls.base_url(f"127.0.0.1:{port}", peer)
    try:
        async with aiohttp.ClientSession() as session:

            async def calls_running() -> int | None:
                try:
                    async with session.get(base_url + contract.PATH_HEALTH, **peer.request_options()) as answer:
                        return int((await answer.json())["calls"])
                except aiohttp.ClientConnectorError:
                    return None  # not listening yet

            async def calls_running_is(count: int) -> bool:
                return await calls_running() == count

            await until(lambda: calls_running_is(0))

            with pytest.raises(aiohttp.ClientError):
                async with session.get(f"http://127.0.0.1:{port}{contract.PATH_HEALTH}"):
                    pass

            warm = await signer.open_session(session, base_url, TOOL, peer.request_options())
            done_marker = tmp_path / "quick-ran"  # detachable (a task's run): its caller is watched while it runs
            detachable = {**json.loads(call_body(TOOL, "quick", done_marker, seconds=0.5)), "detachSeconds": 5}
            body = json.dumps(detachable).encode()
            headers = [
                ("Content-Type", "application/json"),
                *[("Authorization", v) for v in bearer(warm.credential("call", "quick", CALLER, body))],
            ]
            async with session.post(
                base_url + contract.PATH_CALLS, data=body, headers=headers, **peer.request_options()
            ) as answer:
                events = [json.loads(line) for line in (await answer.text()).splitlines() if line.strip()]
            assert answer.status == 200 and events[-1]["event"] == "result", events
            assert done_marker.exists()

            started = tmp_path / "long-started"
            body = call_body(TOOL, "long", started, seconds=60)
            headers = [
                ("Content-Type", "application/json"),
                *[("Authorization", v) for v in bearer(warm.credential("call", "long", CALLER, body))],
            ]

            async def long_call() -> None:
                async with session.post(
                    base_url + contract.PATH_CALLS, data=body, headers=headers, **peer.request_options()
                ) as answer:
                    await answer.read()

            call = asyncio.create_task(long_call())
            await until(started.exists)
            assert await calls_running() == 1
            call.cancel()  # the caller leaves: aiohttp closes its TLS connection
            await asyncio.gather(call, return_exceptions=True)
            await until(lambda: calls_running_is(0))
            assert worker.returncode is None, "the call stopped; the worker serves on"
    finally:
        worker.terminate()
        await worker.wait()
