"""Fair share benchmark: `python -m bench.fairness` (part of `make bench`; docs/fair-share.md).

(f1) **Two tenants, two slots.** A real `mcptasks serve` with `MCPTASKS_MAX_CONCURRENT_TASKS=2` and bearer
tokens of two tenants. The flooding tenant creates `--flood` tasks of `--flood-run-s` seconds at once and
tops its backlog up as they finish, so both slots are always wanted; the trickling tenant creates one
`--trickle-run-s` task every `--every-s` seconds. A trickling task's **wait** is from its `CreateTaskResult`
to the first `tasks/get` (polled every 10 ms) whose `statusMessage` no longer says `queued:` (the runner
claimed it). Printed: its p50/p99 wait under the flood against the same tenant's wait on an idle server.
The bound the rule promises is one slot's turnover (here at most `--flood-run-s` plus a process start).

(f2) **The claim path's reads.** In process, on a SQLite file holding `--queued` queued tasks of 10 tenants
and 50 principals, 16 leased: the time of one claim pass's reads, oldest-first (`list_runnable`, before
fair share) against fair share (`claim_view` + `fair_share.pick` + `queued_records`, as `runner.claims`),
for 2 free slots; median and p99 of 300 passes each.

The server is pinned to the first allowed CPU and this process to the second, like `bench.run`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp

from mcp_tasks.store.manifests import load_manifest_file
from mcp_tasks.store.sqlite import SqliteTaskStore
from mcp_tasks.store.sqlite import store as sqlite_store
from mcp_tasks.tasks import fair_share, transitions
from mcp_tasks.tasks.ids import mint_task_id
from mcp_tasks.tasks.limits import LimitSettings
from mcp_tasks.tasks.owner import Owner

REPO = Path(__file__).resolve().parents[1]
TOOLS = REPO / "bench" / "tools_fairness"
TOKENS = """\
tokens:
  - {token: flood-token, tenant: flood, subject: batch}
  - {token: trickle-token, tenant: trickle, subject: user}
"""
CAPS = {"extensions": {"io.modelcontextprotocol/tasks": {}}}
POLL_S = 0.01


def _cpus() -> tuple[set[int], set[int]]:
    allowed = sorted(os.sched_getaffinity(0))
    return {allowed[0]}, {allowed[-1]}


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


class Client:
    """A minimal MCP 2026-07-28 client of the tasks extension, as one principal."""

    def __init__(self, session: aiohttp.ClientSession, url: str, token: str) -> None:
        self.session = session
        self.url = url
        self.token = token
        self._id = 0

    async def request(self, method: str, params: dict[str, Any], name: str) -> dict[str, Any]:
        self._id += 1
        meta = {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": CAPS,
            "io.modelcontextprotocol/clientInfo": {"name": "bench.fairness", "version": "0"},
        }
        body = {"jsonrpc": "2.0", "id": self._id, "method": method, "params": {**params, "_meta": meta}}
        headers = {
            "Authorization": f"Bearer {self.token}",
            "Mcp-Method": method,
            "Mcp-Name": name,
            "MCP-Protocol-Version": "2026-07-28",
            "Accept": "application/json, text/event-stream",
        }
        async with self.session.post(self.url, json=body, headers=headers) as response:
            answer = await response.json()
        if "result" not in answer:
            raise RuntimeError(f"{method} failed: {answer}")
        return dict(answer["result"])

    async def start(self, seconds: float) -> str:
        result = await self.request(
            "tools/call", {"name": "bench_sleep", "arguments": {"seconds": seconds}}, "bench_sleep"
        )
        if result.get("resultType") != "task":
            raise RuntimeError(f"no task: {result}")
        return str(result["taskId"])

    async def get(self, task_id: str) -> dict[str, Any]:
        return await self.request("tasks/get", {"taskId": task_id}, task_id)


@contextlib.contextmanager
def serving(folder: Path, slots: int) -> Iterator[str]:
    """`mcptasks serve` on a free port with `slots` slots and the two tenants' tokens; yields its URL."""
    tokens = folder / "tokens.yaml"
    tokens.write_text(TOKENS)
    port_file = folder / "port"
    server_cpus, _ = _cpus()
    env = {
        **os.environ,
        "MCPTASKS_MAX_CONCURRENT_TASKS": str(slots),
        "MCPTASKS_LOG_LEVEL": "WARNING",
        "MCPTASKS_STOP_HANDS_OVER": "false",  # its tools stop with it: nothing outlives the benchmark
    }
    command = [sys.executable, "-m", "bench.server", "serve", "--tools", str(TOOLS), "--data-dir", str(folder / "data")]
    command += ["--tokens", str(tokens), "--port", "0"]
    process = subprocess.Popen(
        command,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    os.sched_setaffinity(process.pid, server_cpus)  # before it serves; its tool processes inherit the pin
    try:
        assert process.stdout is not None
        url = ""
        deadline = time.monotonic() + 30
        while not url and time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                raise RuntimeError("the server exited before listening")
            for word in line.split():
                if word.startswith("http://") and word.rstrip(".,").endswith("/mcp"):
                    url = word.rstrip(".,")
        if not url:
            raise RuntimeError("the server did not say where it listens")
        port_file.write_text(url)
        yield url
    finally:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(15)
        if process.poll() is None:
            process.kill()


async def _wait_s(client: Client, task_id: str, created_at: float) -> float:
    """Seconds from `created_at` to the first read that is no longer queued."""
    while True:
        task = await client.get(task_id)
        message = task.get("statusMessage") or ""
        if task["status"] != "working" or not message.startswith(fair_share.QUEUED_PREFIX):
            return time.monotonic() - created_at
        await asyncio.sleep(POLL_S)


async def _trickle(client: Client, samples: int, every_s: float, run_s: float) -> list[float]:
    waits: list[float] = []
    for _ in range(samples):
        started = time.monotonic()
        task_id = await client.start(run_s)
        waits.append(await _wait_s(client, task_id, started))
        await asyncio.sleep(max(0.0, every_s - (time.monotonic() - started)))
    return waits


async def _flood(client: Client, backlog: int, run_s: float, stop: asyncio.Event) -> int:
    """Keep `backlog` of the flooding tenant's tasks unfinished until `stop`; return how many it created."""
    pending = [await client.start(run_s) for _ in range(backlog)]
    created = len(pending)
    while not stop.is_set():
        still = []
        for task_id in pending:
            if (await client.get(task_id))["status"] == "working":
                still.append(task_id)
        for _ in range(backlog - len(still)):
            still.append(await client.start(run_s))
            created += 1
        pending = still
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.25)
    return created


@contextlib.asynccontextmanager
async def _clients(url: str) -> AsyncIterator[tuple[Client, Client]]:
    async with aiohttp.ClientSession() as session:
        yield Client(session, url, "flood-token"), Client(session, url, "trickle-token")


async def two_tenants(args: argparse.Namespace) -> dict[str, list[float]]:
    """(f1): the trickling tenant's waits on an idle server, then under the flood."""
    waits: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-fairness-") as folder, serving(Path(folder), 2) as url:
        async with _clients(url) as (flood, trickle):
            waits["idle"] = await _trickle(trickle, args.samples, args.every_s, args.trickle_run_s)
            stop = asyncio.Event()
            flooding = asyncio.create_task(_flood(flood, args.flood, args.flood_run_s, stop), name="flood")
            await asyncio.sleep(args.flood_run_s)  # both slots taken and the backlog queued
            try:
                waits["flood"] = await _trickle(trickle, args.samples, args.every_s, args.trickle_run_s)
            finally:
                stop.set()
                created = await flooding
        print(f"(f1) flooding tenant created {created} tasks of {args.flood_run_s:g}s; 2 slots")
    return waits


async def claim_path(queued: int) -> dict[str, list[float]]:
    """(f2): the reads of one claim pass, oldest-first against fair share, in microseconds."""
    (tool,) = load_manifest_file(TOOLS / "fairness_tools.yaml")
    with tempfile.TemporaryDirectory(prefix="bench-claims-") as folder:
        store = SqliteTaskStore(Path(folder) / "tasks.sqlite3")
        await store.open()
        try:
            now = dt.datetime.now(dt.UTC)
            owners = [Owner(f"tenant-{i % 10}", f"user-{i}", "static") for i in range(50)]
            rows = []
            for index in range(queued + 16):
                record = transitions.new_task(
                    mint_task_id(), owners[index % 50], tool, {"seconds": 1}, now - dt.timedelta(seconds=queued - index)
                )
                if index >= queued:  # 16 running
                    record = transitions.claim(record, "bench:1:x", now, dt.timedelta(hours=1), 3_600_000)
                rows.append(store._row_values(record, 2))  # the store's own encoder (bench only)
            placeholders = ",".join("?" * len(sqlite_store._COLUMNS.split(",")))
            await store._w.execute("BEGIN IMMEDIATE")
            await store._w.executemany(f"INSERT INTO tasks ({sqlite_store._COLUMNS}) VALUES ({placeholders})", rows)
            await store._w.execute("COMMIT")
            limits = LimitSettings()
            times: dict[str, list[float]] = {"oldest-first": [], "fair share": []}
            for round_ in range(300):
                for name in ("oldest-first", "fair share") if round_ % 2 else ("fair share", "oldest-first"):
                    started = time.perf_counter()
                    if name == "oldest-first":
                        await store.list_runnable(now, 2)
                    else:
                        view = await store.claim_view(now, 2)  # as `runner.claims.Claimer._fair_share`
                        usage = fair_share.Usage.counted(view.running)
                        picked = fair_share.pick(view.queued, usage, limits, 2)
                        await store.queued_records([task.task_id for task in picked])
                    times[name].append((time.perf_counter() - started) * 1e6)
        finally:
            await store.aclose()
    return times


def _row(name: str, values: list[float], unit: str, scale: float = 1.0) -> str:
    p50 = statistics.median(values) * scale
    p99 = _percentile(values, 0.99) * scale
    return f"| {name} | {len(values)} | {p50:.1f} {unit} | {p99:.1f} {unit} |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flood", type=int, default=8, help="the flooding tenant's backlog (tasks)")
    parser.add_argument("--flood-run-s", type=float, default=2.0)
    parser.add_argument("--trickle-run-s", type=float, default=0.1)
    parser.add_argument("--every-s", type=float, default=1.0)
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--queued", type=int, default=20_000, help="(f2) queued tasks in the file")
    parser.add_argument("--only", choices=("f1", "f2"))
    args = parser.parse_args(argv)
    _, client_cpus = _cpus()
    os.sched_setaffinity(0, client_cpus)
    if args.only != "f2":
        waits = asyncio.run(two_tenants(args))
        print("| trickling tenant's wait | samples | p50 | p99 |\n|---|---|---|---|")
        print(_row("idle server", waits["idle"], "ms", 1000))
        print(_row(f"behind a backlog of {args.flood}", waits["flood"], "ms", 1000))
        print(f"one slot's turnover here: at most {args.flood_run_s * 1000:.0f} ms plus a process start")
    if args.only != "f1":
        times = asyncio.run(claim_path(args.queued))
        print(
            f"(f2) one claim pass's reads, {args.queued} queued tasks of 10 tenants / 50 principals, "
            "16 running, 2 slots"
        )
        print("| claim pass | passes | p50 | p99 |\n|---|---|---|---|")
        for name, values in times.items():
            print(_row(name, values, "µs"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
