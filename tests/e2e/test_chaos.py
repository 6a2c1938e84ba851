"""Bounded chaos: kill -9 the embedded server during concurrent creates, several rounds, then drain.

Our choice (crash-only review, docs/design.md §7 and §13): across the rounds, every acknowledged task
survives, no non-idempotent run happens twice, no task is left unfinished, no tool process outlives its
task, and the SQLite file passes `PRAGMA integrity_check`. Runs the real `mcptasks serve` as a child
process on a real SQLite file; the tool (`ledger`) notes each run's start in a file. Rounds and load are
small enough for `make test`; `MCPTASKS_CHAOS_ROUNDS=20` runs longer.
"""

from __future__ import annotations

import asyncio
import collections
import os
import random
import sqlite3
from pathlib import Path

import aiohttp

from tests.conftest import McpHttp, exited, until
from tests.e2e.test_durability import ServerProcess, tool_pids

ROUNDS = int(os.environ.get("MCPTASKS_CHAOS_ROUNDS", "4"))
CLIENTS = 3
CREATES_PER_ROUND = 12
"""Most creates one client sends per round, so the drain stays short (≤ 36 tasks a round)."""


async def create_until_killed(
    mcp: McpHttp, ledger: Path, acknowledged: list[str], stop: asyncio.Event, rng: random.Random
) -> None:
    """Create tasks, paced, until `stop` (at most `CREATES_PER_ROUND`); keep every id the server acknowledged."""
    for _ in range(CREATES_PER_ROUND):
        if stop.is_set():
            return
        try:
            reply = await mcp.call_tool("ledger", {"ledger": str(ledger), "seconds": rng.uniform(0.2, 1.5)})
        except (TimeoutError, aiohttp.ClientError):
            return  # the server died mid-request: that create was never acknowledged
        if reply.status == 200 and reply.result.get("resultType") == "task":
            acknowledged.append(str(reply.result["taskId"]))
        # Stays: pacing, a client's think time between creates; the load profile is what the test is made of.
        await asyncio.sleep(rng.uniform(0.02, 0.15))


async def test_kill_9_during_concurrent_creates_loses_nothing_and_runs_nothing_twice(
    tmp_path: Path, http_session: aiohttp.ClientSession
) -> None:
    server = ServerProcess(tmp_path / "data")
    ledger = tmp_path / "ledger.txt"
    ledger.touch()
    rng = random.Random(7)
    acknowledged: list[str] = []
    try:
        for _ in range(ROUNDS):
            url = await server.start()
            stop = asyncio.Event()
            clients = [
                asyncio.create_task(create_until_killed(McpHttp(http_session, url), ledger, acknowledged, stop, rng))
                for _ in range(CLIENTS)
            ]
            # Stays: a random stretch of load before each kill -9 is what is under test (where the kill lands).
            await asyncio.sleep(rng.uniform(0.3, 1.2))
            await server.kill()
            stop.set()
            await asyncio.gather(*clients)

        mcp = McpHttp(http_session, await server.start())
        finished: dict[str, dict[str, object]] = {}

        async def all_finished() -> bool:  # the server is another process: read its tasks again
            for task_id in acknowledged:
                if task_id not in finished:
                    reply = await mcp.get(task_id)
                    assert reply.status == 200, f"acknowledged task {task_id} was lost: {reply.body}"
                    if reply.result["status"] in ("completed", "failed", "cancelled"):
                        finished[task_id] = reply.result
            return len(finished) == len(acknowledged)

        await until(all_finished, timeout_s=90, interval_s=0.2)
        for pid in [pid for task_id in acknowledged for pid in tool_pids(task_id)]:
            await exited(pid, timeout_s=10)
    finally:
        await server.stop()

    starts = collections.Counter(line.split()[1] for line in ledger.read_text().splitlines())
    twice = {task_id: count for task_id, count in starts.items() if count > 1}
    assert not twice, f"non-idempotent runs started twice: {twice}"
    outcomes = collections.Counter(str(task["status"]) for task in finished.values())
    unknown = [t for t in finished.values() if "outcome is unknown" in str(t.get("statusMessage", ""))]
    print(
        f"chaos: {ROUNDS} rounds, {len(acknowledged)} acknowledged, outcomes {dict(outcomes)}, {len(unknown)} unknown"
    )
    assert len(acknowledged) >= ROUNDS, "the load created tasks in every round"
    assert outcomes["completed"] + len(unknown) == len(acknowledged), outcomes
    with sqlite3.connect(tmp_path / "data" / "tasks.sqlite3") as database:
        assert database.execute("PRAGMA integrity_check").fetchone() == ("ok",)
