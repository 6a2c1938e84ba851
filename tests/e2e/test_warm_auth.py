"""Authenticated warm workers on the embedded default: real worker processes of the test tools, called over
real sockets by an outsider (any local process can reach their loopback port) and by the runner.

Our choice (issue 21 item 1, issue 31 item 1; docs/security.md, docs/tool-runtime.md §Warm workers): every
call, re-attach and cancel carries a credential keyed with a session the runner opened on that worker with
its warm-call key; a worker refuses anything else with 401 before any tool code runs (asserted through the
file `warm_sleeper` creates when it runs), so no outsider takes a slot; `/healthz` stays open.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import stat
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp

from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.runner.warm_pool import WarmPool
from mcp_tasks.runtime import contract
from mcp_tasks.worker.warm import WarmTarget, send_call
from mcp_tasks.worker.warm_auth import CallAuth, WarmCallSigner, WarmSession, new_private_pem
from tests.conftest import PLAIN_CAPS, REPO, Embedded, McpHttp, until
from tests.controlplane.cluster import free_port
from tests.warm_attacks import (
    CALLER,
    UNAUTHORIZED,
    Answer,
    bearer,
    call_body,
    health,
    post,
    post_offer,
    refused_requests,
    squat,
    worker_key,
)

TOOL = "warm_sleeper_idempotent"  # one worker, one slot, not stopped when idle during a test


@contextlib.asynccontextmanager
async def a_lone_worker(http_session: aiohttp.ClientSession, port: int, public_pem: str) -> AsyncIterator[str]:
    """A worker of `TOOL` on `port` that checks offers with `public_pem`, started and stopped here; its URL."""
    base_url = f"http://127.0.0.1:{port}"
    env = {
        "PATH": os.environ["PATH"],
        contract.ENV_SERVE_PORT: str(port),
        contract.ENV_SERVE_HOST: "127.0.0.1",
        contract.ENV_SERVE_TOOL: TOOL,
        contract.ENV_SERVE_CALL_KEY: public_pem,
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "tools.py", "warm_sleeper", cwd=REPO / "tests" / "tools", env=env
    )
    try:

        async def ready() -> bool:
            try:
                return (await health(http_session, base_url)).status == 200
            except aiohttp.ClientConnectionError:
                return False  # not listening yet

        await until(ready)
        yield base_url
    finally:
        process.terminate()
        await process.wait()


async def a_worker(mcp: McpHttp, embedded: Embedded) -> str:
    """Start the tool's worker with a call through the gateway; its `http://127.0.0.1:port`."""
    reply = await mcp.call_tool(TOOL, {"seconds": 0}, caps=PLAIN_CAPS)
    assert reply.result["content"][0]["text"].startswith("slept"), reply.body
    pool = embedded.runner.pools.started[TOOL]
    assert isinstance(pool, WarmPool)
    (worker,) = pool.workers
    return worker.base_url


async def test_outsiders_calls_cancels_and_reattaches_are_refused_before_the_tool_runs(
    mcp: McpHttp, embedded: Embedded, http_session: aiohttp.ClientSession, tmp_path: Path
) -> None:
    """Unauthenticated, malformed, forged (a guessed session key), unknown-session, expired, too long-lived,
    other-call, other-body, wrong-operation and doubled credentials, and session offers that are forged,
    for another tool or worker, expired, too long or replayed: 401 with a short body that echoes nothing;
    the tool never ran."""
    base_url = await a_worker(mcp, embedded)
    marker = tmp_path / "outsider-ran"
    answers = await refused_requests(http_session, base_url, embedded.runner.ctx.signer, TOOL, marker)
    assert {name: (a.status, a.body) for name, a in answers.items()} == dict.fromkeys(answers, (401, UNAUTHORIZED))
    assert not marker.exists(), "the tool ran for an outsider"
    assert (await health(http_session, base_url)).body == {"status": "ok", "calls": 0, "concurrency": 1}


async def test_a_call_minted_by_the_runner_runs_once_and_its_credential_cannot_be_replayed(
    mcp: McpHttp, embedded: Embedded, http_session: aiohttp.ClientSession, tmp_path: Path
) -> None:
    base_url = await a_worker(mcp, embedded)
    marker = tmp_path / "legit-ran"
    body = call_body(TOOL, "legit-1", marker)
    warm = await embedded.runner.ctx.signer.open_session(http_session, base_url, TOOL)
    token = warm.credential("call", "legit-1", CALLER, body)
    answer = await post(http_session, base_url, body, bearer(token))
    assert (answer.status, answer.body["event"]) == (200, "result")
    assert marker.exists()
    marker.unlink()
    replay = await post(http_session, base_url, body, bearer(token))
    assert (replay.status, replay.body) == (401, UNAUTHORIZED)
    assert not marker.exists(), "a replayed credential ran the tool again"


async def test_a_session_opened_on_one_worker_authorizes_nothing_on_another(
    mcp: McpHttp, embedded: Embedded, http_session: aiohttp.ClientSession, tmp_path: Path
) -> None:
    """Two workers of the same tool checking the same executor key: a credential of a session opened on
    the first, and the very offer that opened it, are refused by the second (401, the tool never ran
    there); the first runs the call. Our choice (docs/security.md, Warm workers): a session key is derived
    with the worker's own key, so a worker (or a tool inside it) holds nothing that works on another."""
    first = await a_worker(mcp, embedded)
    signer = embedded.runner.ctx.signer
    async with a_lone_worker(http_session, free_port(), signer.public_pem) as second:
        warm, offer = signer.offer(TOOL, first, await worker_key(http_session, first))
        assert (await post_offer(http_session, first, offer)).status == 204
        marker = tmp_path / "elsewhere-ran"
        body = call_body(TOOL, "elsewhere-1", marker)
        elsewhere = await post(http_session, second, body, bearer(warm.credential("call", "elsewhere-1", CALLER, body)))
        assert (elsewhere.status, elsewhere.body) == (401, UNAUTHORIZED)
        assert (await post_offer(http_session, second, offer)) == Answer(401, UNAUTHORIZED)
        assert not marker.exists(), "the other worker ran the call"
        here = await post(http_session, first, body, bearer(warm.credential("call", "elsewhere-1", CALLER, body)))
        assert (here.status, here.body["event"]) == (200, "result") and marker.exists()


async def test_a_worker_restarted_at_the_same_address_gets_a_new_session_and_runs_the_call_once(
    http_session: aiohttp.ClientSession, tmp_path: Path
) -> None:
    """The executor's kept session dies with its worker: the restarted one answers 401, and the executor
    opens a new session and sends the call once more (nothing ran on the 401). Our choice
    (`worker.warm_auth.CallAuth.request`)."""
    signer = WarmCallSigner.from_pem(new_private_pem())
    port = free_port()
    target = WarmTarget(f"http://127.0.0.1:{port}")
    events: list[JsonObject] = []

    async def on_event(event: JsonObject) -> None:
        events.append(event)

    async def one_call(execution_id: str, marker: Path) -> JsonObject:
        body = json.loads(call_body(TOOL, execution_id, marker))
        return await send_call(http_session, target, body, on_event, CallAuth(signer, TOOL, execution_id, CALLER))

    async with a_lone_worker(http_session, port, signer.public_pem):
        assert (await one_call("before-1", tmp_path / "before"))["event"] == "result"
        before = await signer.session(http_session, target.base_url, TOOL)
    async with a_lone_worker(http_session, port, signer.public_pem):
        marker = tmp_path / "after"
        assert (await one_call("after-1", marker))["event"] == "result"
        assert marker.exists()
        after = await signer.session(http_session, target.base_url, TOOL)
    assert isinstance(before, WarmSession) and isinstance(after, WarmSession)
    assert after.session_id != before.session_id


async def test_outsiders_cannot_squat_the_slots(
    mcp: McpHttp, embedded: Embedded, http_session: aiohttp.ClientSession, tmp_path: Path
) -> None:
    """Twenty concurrent long calls without a credential take no slot: the one slot still serves the gateway."""
    base_url = await a_worker(mcp, embedded)
    marker = tmp_path / "squatter-ran"
    assert await squat(http_session, base_url, TOOL, marker, 20) == [401] * 20
    assert (await health(http_session, base_url)).body["calls"] == 0
    reply = await mcp.call_tool(TOOL, {"seconds": 0}, caps=PLAIN_CAPS)
    assert reply.result["content"][0]["text"].startswith("slept"), reply.body
    assert not marker.exists()


def _threads(pid: int) -> int:
    """The process's thread count, as the kernel reports it (`/proc/<pid>/status`)."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))


async def test_idle_connections_cannot_take_every_thread_of_a_worker(
    mcp: McpHttp, embedded: Embedded, http_session: aiohttp.ClientSession
) -> None:
    """Our choice (a breaker's finding: each silent connection held a thread of its own for ever, until the
    worker could start no thread for the gateway's call): a worker serves 256 connections at once, closes
    one more at once, and frees a silent one's thread after 30 s. 400 silent connections leave it below
    its cap of threads, and it serves the gateway's call once they are gone."""
    base_url = await a_worker(mcp, embedded)
    pool = embedded.runner.pools.started[TOOL]
    assert isinstance(pool, WarmPool)
    (worker,) = pool.workers
    pid = worker.process.pid
    assert pid is not None
    before = _threads(pid)
    port = int(base_url.rsplit(":", 1)[1])
    idle = [await asyncio.open_connection("127.0.0.1", port) for _ in range(400)]
    try:
        await until(lambda: _threads(pid) >= before + 200)  # the first connections have their threads
        assert _threads(pid) <= before + 256, "one thread per connection, at most 256 connections"
    finally:
        for _reader, writer in idle:
            writer.close()
    await until(lambda: _threads(pid) <= before + 1)
    reply = await mcp.call_tool(TOOL, {"seconds": 0}, caps=PLAIN_CAPS)
    assert reply.result["content"][0]["text"].startswith("slept"), reply.body


async def test_only_the_calls_caller_may_cancel_or_reattach_to_it(
    mcp: McpHttp, embedded: Embedded, http_session: aiohttp.ClientSession, tmp_path: Path
) -> None:
    """A validly signed cancel or re-attach naming another caller finds no call (404, as for an unknown
    one); the call's own caller cancels it."""
    base_url = await a_worker(mcp, embedded)
    warm = await embedded.runner.ctx.signer.open_session(http_session, base_url, TOOL)
    marker = tmp_path / "long-ran"
    body = call_body(TOOL, "long-1", marker, seconds=30)
    running = asyncio.create_task(
        post(http_session, base_url, body, bearer(warm.credential("call", "long-1", CALLER, body)))
    )
    try:
        await until(marker.exists)
        url = f"{base_url}{contract.PATH_CALLS}/long-1"
        other = bearer(warm.credential("cancel", "long-1", "b" * 32))
        async with http_session.delete(url, headers={"Authorization": other[0]}) as response:
            assert response.status == 404
        other = bearer(warm.credential("reattach", "long-1", "b" * 32))
        async with http_session.get(url + "?waitSeconds=0", headers={"Authorization": other[0]}) as response:
            assert response.status == 404
        assert (await health(http_session, base_url)).body["calls"] == 1
        own = bearer(warm.credential("cancel", "long-1", CALLER))
        async with http_session.delete(url, headers={"Authorization": own[0]}) as response:
            assert response.status == 202
        answer = await asyncio.wait_for(running, 10)
        assert answer.body == {"event": "cancelled"}
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)


async def test_the_worker_holds_only_the_public_key_and_the_server_keeps_the_private_one_0600(
    mcp: McpHttp, embedded: Embedded, tmp_path: Path
) -> None:
    """The key reaches the worker in its environment (not argv), public half only; the private key stays in
    the data folder, mode 0600, for a restarted server to re-attach to its calls."""
    await a_worker(mcp, embedded)
    pool = embedded.runner.pools.started[TOOL]
    assert isinstance(pool, WarmPool)
    pid = pool.workers[0].process.pid
    environ = Path(f"/proc/{pid}/environ").read_bytes()
    assert b"MCPTASKS_SERVE_CALL_KEY=-----BEGIN PUBLIC KEY-----" in environ
    assert b"PRIVATE KEY" not in environ and b"PUBLIC KEY" not in Path(f"/proc/{pid}/cmdline").read_bytes()
    key = tmp_path / "warm-call.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and b"PRIVATE KEY" in key.read_bytes()


async def test_a_worker_without_a_key_refuses_to_start() -> None:
    """A warm worker would otherwise serve anyone: without `MCPTASKS_SERVE_CALL_KEY` it exits 2, saying why."""
    env = {
        "PATH": os.environ["PATH"],
        contract.ENV_SERVE_PORT: str(free_port()),
        contract.ENV_SERVE_HOST: "127.0.0.1",
        contract.ENV_SERVE_TOOL: "warm_echo",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "tools.py",
        "warm_echo",
        cwd=REPO / "tests" / "tools",
        env=env,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 2
    assert contract.ENV_SERVE_CALL_KEY.encode() in stderr
