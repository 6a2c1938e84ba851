"""Warm workers of a tool image built with the previous runtime, called by this version's executor: real
worker processes running the runtime of the commit before warm-call sessions (its files from `git archive`,
imported through `PYTHONPATH` instead of this checkout's), over real sockets.

Our choice (docs/tool-runtime.md §7 "Workers of an older runtime", docs/security.md "Warm workers"): an
upgrade of mcp-tasks loses no work and a version works with what an older one left, and users build their
tool images themselves. So a worker that answers 404 to `GET /v1/sessions` is sent the previous scheme's
signed credential, one per request, which its runtime still takes once only; the executor logs it once per
worker, and asks again after a 401 (its address may serve a rebuilt image) or an hour.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import aiohttp
import jwt
import pytest
import yaml

from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.runner.warm_pool import WarmPool
from mcp_tasks.runtime import contract
from mcp_tasks.worker.warm import WarmTarget, send_call
from mcp_tasks.worker.warm_auth import (
    CallAuth,
    LegacyWorker,
    WarmCallSigner,
    WarmSession,
    new_private_pem,
)
from tests.conftest import PLAIN_CAPS, REPO, McpHttp, server_settings, serving, until
from tests.controlplane.cluster import free_port
from tests.warm_attacks import CALLER, UNAUTHORIZED, health, post

BEFORE_SESSIONS = "a86c033acf16315d17eca6fce62855a04f4094db"
"""The last commit whose runtime knows no sessions (7e24b09^): warm workers check one signed JWT per request."""
OLD_FILES = ("mcp_tasks/__init__.py", "mcp_tasks/runtime", "mcp_tasks/protocol", "tests/tools/tools.py")
"""What a tool image of that commit holds of ours: the runtime (and the protocol it imports), and the tool."""
TOOL = "older_ledger"
OLDER_RUNTIME_LOG = "runs a tool runtime from before warm-call sessions"


@pytest.fixture(scope="module")
def older_runtime(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding `OLD_FILES` as of `BEFORE_SESSIONS`: on `PYTHONPATH`, `mcp_tasks` is that runtime."""
    found = subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"{BEFORE_SESSIONS}^{{commit}}"], check=False)
    if found.returncode != 0:
        pytest.skip(f"this clone does not hold commit {BEFORE_SESSIONS} (a shallow clone): no older runtime to run")
    root = tmp_path_factory.mktemp("older-runtime")
    archive = root / "older.tar"
    subprocess.run(["git", "-C", str(REPO), "archive", "-o", str(archive), BEFORE_SESSIONS, *OLD_FILES], check=True)
    subprocess.run(["tar", "-x", "-f", str(archive), "-C", str(root)], check=True)
    archive.unlink()
    return root


def ledger_lines(ledger: Path) -> list[str]:
    """The runs the `ledger` tool noted, one line each."""
    return ledger.read_text().splitlines() if ledger.exists() else []


def call_body(execution_id: str, ledger: Path) -> bytes:
    return json.dumps(
        {"executionId": execution_id, "tool": TOOL, "arguments": {"ledger": str(ledger), "seconds": 0}}
    ).encode()


async def sessions_status(http: aiohttp.ClientSession, base_url: str) -> int:
    """What the worker answers to `GET /v1/sessions` (404: a runtime from before sessions)."""
    async with http.get(base_url + contract.PATH_SESSIONS) as response:
        return response.status


@contextlib.asynccontextmanager
async def a_lone_worker(
    http: aiohttp.ClientSession, port: int, public_pem: str, older_runtime: Path | None
) -> AsyncIterator[str]:
    """A `ledger` worker of `TOOL` on `port`, of the runtime in `older_runtime` (this checkout's without);
    started and stopped here; its URL."""
    base_url = f"http://127.0.0.1:{port}"
    env = {
        "PATH": os.environ["PATH"],
        contract.ENV_SERVE_PORT: str(port),
        contract.ENV_SERVE_HOST: "127.0.0.1",
        contract.ENV_SERVE_TOOL: TOOL,
        contract.ENV_SERVE_CALL_KEY: public_pem,
    }
    if older_runtime is not None:
        env["PYTHONPATH"] = str(older_runtime)
    tools = (older_runtime or REPO) / "tests" / "tools"
    process = await asyncio.create_subprocess_exec(sys.executable, "tools.py", "ledger", cwd=tools, env=env)
    try:

        async def ready() -> bool:
            try:
                return (await health(http, base_url)).status == 200
            except aiohttp.ClientConnectionError:
                return False  # not listening yet

        await until(ready)
        assert await sessions_status(http, base_url) == (404 if older_runtime else 200)
        yield base_url
    finally:
        process.terminate()
        await process.wait()


async def test_a_warm_call_to_a_worker_of_the_previous_runtime_runs_once_and_its_credential_cannot_be_replayed(
    tmp_path: Path,
    older_runtime: Path,
    http_session: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The embedded server's pool starts a worker of the previous runtime (it answers 404 to
    `GET /v1/sessions`); two calls through the gateway each run exactly once, and the executor says once
    that the image should be rebuilt. A call the runner's signer sends there carries the previous scheme's
    credential (a JWT, EdDSA); sent again, the old worker refuses it (401) and the tool does not run again."""
    caplog.set_level(logging.INFO, logger="mcp_tasks.worker")
    folder = tmp_path / "tools"
    folder.mkdir()
    manifest = {
        "apiVersion": "mcptasks.io/v1alpha1",
        "kind": "McpTool",
        "metadata": {"name": "older-ledger"},
        "spec": {
            "name": TOOL,
            "description": "the ledger tool, in an image built with the runtime before warm-call sessions",
            "inputSchema": {"type": "object"},
            "execution": {"taskPolicy": "optional"},
            "container": {
                "command": ["python", "tools.py", "ledger"],
                "workingDir": str(older_runtime / "tests" / "tools"),
                "env": [{"name": "PYTHONPATH", "value": str(older_runtime)}],
            },
            "warm": {"minWorkers": 0, "maxWorkers": 1},
        },
    }
    (folder / "older-ledger.yaml").write_text(yaml.safe_dump(manifest))
    settings = server_settings(tmp_path / "data")
    settings = replace(settings, serve=replace(settings.serve, tools_dirs=(*settings.serve.tools_dirs, folder)))
    ledger = tmp_path / "ledger"
    async with serving(settings) as server:
        mcp = McpHttp(http_session, server.url)
        first = await mcp.call_tool(TOOL, {"ledger": str(ledger), "seconds": 0}, caps=PLAIN_CAPS)
        assert first.result["content"][0]["text"].startswith("done"), first.body
        assert len(ledger_lines(ledger)) == 1
        pool = server.runner.pools.started[TOOL]
        assert isinstance(pool, WarmPool)
        (worker,) = pool.workers
        base_url = worker.base_url
        assert await sessions_status(http_session, base_url) == 404, "not a worker of the previous runtime"
        second = await mcp.call_tool(TOOL, {"ledger": str(ledger), "seconds": 0}, caps=PLAIN_CAPS)
        assert second.result["content"][0]["text"].startswith("done"), second.body
        assert len(ledger_lines(ledger)) == 2
        told = [r for r in caplog.records if OLDER_RUNTIME_LOG in r.getMessage() and base_url in r.getMessage()]
        assert [r.levelno for r in told] == [logging.WARNING], "logged once per worker"

        signer = server.runner.ctx.signer
        assert isinstance(await signer.session(http_session, base_url, TOOL), LegacyWorker)
        body = call_body("replayed-1", ledger)
        response = await CallAuth(signer, TOOL, "replayed-1", CALLER).request(
            http_session, "POST", base_url, contract.PATH_CALLS, "call", body
        )
        async with response:
            events = [json.loads(line) for line in (await response.text()).splitlines() if line.strip()]
            credential = response.request_info.headers["Authorization"]
        assert (response.status, events[-1]["event"]) == (200, "result")
        assert len(ledger_lines(ledger)) == 3
        scheme, _, token = credential.partition(" ")
        assert scheme == "Bearer" and jwt.get_unverified_header(token)["alg"] == "EdDSA"
        replay = await post(http_session, base_url, body, [credential])
        assert (replay.status, replay.body) == (401, UNAUTHORIZED)
        assert len(ledger_lines(ledger)) == 3, "a replayed credential ran the tool again"


async def test_an_address_that_changes_runtime_is_asked_again_and_each_call_runs_once(
    tmp_path: Path, older_runtime: Path, http_session: aiohttp.ClientSession
) -> None:
    """One address serves, in turn, a worker of the previous runtime, a rebuilt one, the previous again and
    a rebuilt one: the executor's kept way of keying (previous scheme or session) meets a 401, asks the
    worker again and sends once more, so every call runs exactly once; a previous-runtime worker kept past
    its recheck time (`LEGACY_RECHECK_S`, set here as if the hour had passed) is asked again before the
    next request, so a rebuilt image gets the session without a refused request first. Our choice
    (`worker.warm_auth.CallAuth.request`, `WarmCallSigner.session`)."""
    signer = WarmCallSigner.from_pem(new_private_pem())
    port = free_port()
    target = WarmTarget(f"http://127.0.0.1:{port}")
    ledger = tmp_path / "ledger"

    async def on_event(event: JsonObject) -> None:
        pass

    async def one_call(execution_id: str) -> None:
        runs = len(ledger_lines(ledger))
        body = json.loads(call_body(execution_id, ledger))
        final = await send_call(http_session, target, body, on_event, CallAuth(signer, TOOL, execution_id, CALLER))
        assert final["event"] == "result", final
        assert len(ledger_lines(ledger)) == runs + 1

    for number, runtime in enumerate((older_runtime, None, older_runtime)):
        async with a_lone_worker(http_session, port, signer.public_pem, runtime):
            await one_call(f"turn-{number}")
            keying = await signer.session(http_session, target.base_url, TOOL)
            assert isinstance(keying, LegacyWorker if runtime else WarmSession)
    assert isinstance(keying, LegacyWorker)
    keying.renew_at = 0.0  # the hour has passed
    async with a_lone_worker(http_session, port, signer.public_pem, None):
        assert isinstance(await signer.session(http_session, target.base_url, TOOL), WarmSession)
        await one_call("rebuilt")
