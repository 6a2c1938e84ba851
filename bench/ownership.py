"""Owner-first timing: does another principal's task answer like an unknown id, whatever its size?

    .venv/bin/python -m bench.ownership [--rounds 4] [--requests 1000]

Runs the real `mcptasks serve` (SQLite, bearer tokens) as a child process. Alice creates a task whose
arguments are about 900 KB; Bob then sends `tasks/get` for that task and for ids that never existed,
interleaved, one request at a time. Both must get the same -32602; this prints the p50 and p99 of each
and their difference (ARCHITECTURE.md §Ownership: "no timing tell worth measuring"). A figure, not a
test assertion (CONVENTIONS.md §Tests).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from mcp_tasks.protocol import constants

REPO = Path(__file__).resolve().parent.parent
TOKENS = "tokens:\n  - {token: alice, tenant: acme, subject: alice}\n  - {token: bob, tenant: acme, subject: bob}\n"
META = {
    constants.META_PROTOCOL_VERSION: constants.PROTOCOL_VERSION,
    constants.META_CLIENT_CAPABILITIES: {"extensions": {constants.TASKS_EXTENSION: {}}},
}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _headers(method: str, name: str, token: str) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "Authorization": f"Bearer {token}",
        constants.HEADER_PROTOCOL_VERSION: constants.PROTOCOL_VERSION,
        constants.HEADER_METHOD: method,
        constants.HEADER_NAME: name,
    }


def _percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def _get(session: aiohttp.ClientSession, url: str, task_id: str) -> tuple[float, Any]:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"taskId": task_id, "_meta": META}})
    started = time.perf_counter()
    async with session.post(url, data=body, headers=_headers("tasks/get", task_id, "bob")) as response:
        answer = await response.json()
    return time.perf_counter() - started, answer["error"]


async def measure(url: str, rounds: int, requests: int) -> dict[str, list[float]]:
    """Latencies (s) of Bob's `tasks/get` for Alice's large task and for unknown ids, interleaved."""
    async with aiohttp.ClientSession() as session:
        arguments = {"label": "x" * 900_000, "seconds": 86_400}
        call = {"name": "bench_wait", "arguments": arguments, "_meta": META}
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call})
        async with session.post(url, data=body, headers=_headers("tools/call", "bench_wait", "alice")) as response:
            foreign = (await response.json())["result"]["taskId"]
        samples: dict[str, list[float]] = {"foreign": [], "unknown": []}
        errors: dict[str, Any] = {}
        for _ in range(rounds):
            for n in range(requests):
                for kind in ("foreign", "unknown") if n % 2 else ("unknown", "foreign"):
                    task_id = foreign if kind == "foreign" else os.urandom(16).hex()
                    elapsed, error = await _get(session, url, task_id)
                    samples[kind].append(elapsed)
                    errors[kind] = error
        if errors["foreign"] != errors["unknown"]:
            raise SystemExit(f"the answers differ: {errors}")
        return samples


async def main(rounds: int, requests: int) -> None:
    with tempfile.TemporaryDirectory(prefix="mcptasks-bench-owner-") as folder:
        tokens = Path(folder) / "tokens.yaml"
        tokens.write_text(TOKENS)
        port = _free_port()
        server = await asyncio.create_subprocess_exec(
            *[sys.executable, "-m", "mcp_tasks.cli", "serve", "--port", str(port), "--tokens", str(tokens)],
            *["--tools", str(REPO / "bench" / "tools"), "--data-dir", str(Path(folder) / "data")],
            env={**os.environ, "MCPTASKS_MAX_CONCURRENT_TASKS": "1", "MCPTASKS_LOG_LEVEL": "WARNING"},
            stdout=asyncio.subprocess.DEVNULL,
        )
        url = f"http://127.0.0.1:{port}/mcp"
        try:
            async with aiohttp.ClientSession() as session, asyncio.timeout(30):
                while True:
                    try:
                        async with session.get(f"http://127.0.0.1:{port}/healthz") as response:
                            if response.status == 200:
                                break
                    except aiohttp.ClientError:
                        await asyncio.sleep(0.05)
            samples = await measure(url, rounds, requests)
        finally:
            server.send_signal(signal.SIGTERM)
            await server.wait()
    print(f"tasks/get by another principal, {rounds} rounds x {requests} requests each, interleaved, 1 client")
    print("| target | p50 ms | p99 ms |")
    print("|---|---|---|")
    for kind, label in (("foreign", "another principal's task, 900 KB of arguments"), ("unknown", "an unknown id")):
        print(
            f"| {label} | {_percentile(samples[kind], 0.5) * 1e3:.3f} | {_percentile(samples[kind], 0.99) * 1e3:.3f} |"
        )
    gap = (_percentile(samples["foreign"], 0.5) - _percentile(samples["unknown"], 0.5)) * 1e3
    print(f"p50 difference (foreign - unknown): {gap:+.3f} ms; the answers are identical")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--requests", type=int, default=1000)
    options = parser.parse_args()
    asyncio.run(main(options.rounds, options.requests))
