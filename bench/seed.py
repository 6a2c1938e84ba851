"""Bulk-load completed tasks into a fresh data dir, with the real store's schema and row encoding.

Records are built exactly as the gateway builds them (`transitions.new_task` for the bench tool's
spec, then `transitions.complete`), owned by the local principal the server uses without a token
file, with the tool's 7-day `ttlMs`. Rows are encoded by `SqliteTaskStore` itself (its row
encoder) and inserted with one `executemany` in one transaction on the store's own connection:
the same bytes as 100,000 `SqliteTaskStore.create` calls, without 100,000 fsyncs.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path

from mcp_tasks.store.manifests import load_manifest_file
from mcp_tasks.store.sqlite import SqliteTaskStore
from mcp_tasks.store.sqlite import store as sqlite_store
from mcp_tasks.tasks import transitions
from mcp_tasks.tasks.ids import mint_task_id
from mcp_tasks.tasks.owner import LOCAL_OWNER

TOOLS_DIR = Path(__file__).parent / "tools"
_RESULT = {"content": [{"type": "text", "text": "done: waited 1 s"}], "isError": False}
_BATCH = 10_000


async def seed(data_dir: Path, count: int) -> list[str]:
    """Create `data_dir/tasks.sqlite3` with `count` completed tasks; return their ids (insertion order)."""
    (tool,) = load_manifest_file(TOOLS_DIR / "bench_tools.yaml")
    store = SqliteTaskStore(data_dir / "tasks.sqlite3")
    await store.open()
    try:
        connection = store._w  # the store's own writer connection (bench only)
        placeholders = ",".join("?" * len(sqlite_store._COLUMNS.split(",")))  # one per column, however many
        statement = f"INSERT INTO tasks ({sqlite_store._COLUMNS}) VALUES ({placeholders})"
        start = dt.datetime.now(dt.UTC)
        ids: list[str] = []
        for offset in range(0, count, _BATCH):
            rows = []
            for index in range(offset, min(count, offset + _BATCH)):
                created = start - dt.timedelta(seconds=count - index)
                arguments = {"label": "seed", "seconds": 1}
                record = transitions.new_task(mint_task_id(), LOCAL_OWNER, tool, arguments, created)
                record = transitions.complete(record, dict(_RESULT), created + dt.timedelta(milliseconds=900))
                rows.append(store._row_values(record, 3))
                ids.append(record.task_id)
            await connection.execute("BEGIN IMMEDIATE")
            await connection.executemany(statement, rows)
            await connection.execute("COMMIT")
        stored = await store.count()
        if stored != count:
            raise RuntimeError(f"seeded {stored} tasks into {data_dir}, expected {count}")
        probe = await store.get(ids[-1], LOCAL_OWNER)  # readable by the server's principal, not expired
        if probe.status.value != "completed":
            raise RuntimeError(f"seeded task {probe.task_id} is {probe.status}")
        await connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        await store.aclose()
    return ids


def seed_sync(data_dir: Path, count: int) -> list[str]:
    """`seed` from synchronous code (the orchestrator)."""
    return asyncio.run(seed(data_dir, count))
