"""The SQLite store answers `get` of an unchanged task from memory (no SQL), and never an older state than
the file holds: a write by another process (or another connection) on the same file is seen by the next
`get`. Our own choice (issue 31 item 2); the rules it must keep are the store contract's (docs/design.md
§3: create is strongly consistent, ownership answers a foreign task like an unknown id, expiry applies).

Real parts: a SQLite file, statements counted through the store's own aiosqlite connections' trace
callbacks, and a second OS process writing the same file.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from mcp_tasks.store.manifests import load_manifest_file
from mcp_tasks.store.sqlite import SqliteTaskStore
from mcp_tasks.store.sqlite.wal_index import WalIndex
from mcp_tasks.tasks import transitions
from mcp_tasks.tasks.errors import TaskNotFound
from mcp_tasks.tasks.ids import mint_task_id
from mcp_tasks.tasks.interfaces import Writer
from mcp_tasks.tasks.owner import Owner
from mcp_tasks.tasks.record import TaskRecord
from tests.conftest import REPO

NOW = datetime.now(UTC).replace(microsecond=0)
"""When the tasks here are created: now, since the stores read expiry on the real clock (one fixed date
expired its tasks an hour after it was written)."""
ALICE = Owner("team", "alice", "static")
MALLORY = Owner("team", "mallory", "static")


def _new(owner: Owner = ALICE) -> TaskRecord:
    tool = load_manifest_file(REPO / "conformance" / "tools" / "fixtures.yaml")[0]
    return transitions.new_task(mint_task_id(), owner, tool, {}, NOW)


class Statements:
    """The SQL each of a store's two connections runs, as SQLite's trace callback reports it."""

    def __init__(self) -> None:
        self.reads: list[str] = []
        self.writes: list[str] = []

    async def attach(self, store: SqliteTaskStore) -> None:
        assert store._reader is not None and store._writer is not None
        await store._reader.set_trace_callback(self.reads.append)
        await store._writer.set_trace_callback(self.writes.append)

    def clear(self) -> None:
        self.reads.clear()
        self.writes.clear()


async def _run_elsewhere(script: str, *args: str) -> None:
    """Run `script` in a fresh Python process (this repository importable) and wait for it to succeed."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, *args, cwd=REPO, stderr=asyncio.subprocess.PIPE
    )
    async with asyncio.timeout(30):
        _, stderr = await process.communicate()
    assert process.returncode == 0, stderr.decode()


_SET_MESSAGE = """
import asyncio, sys
from datetime import UTC, datetime
from pathlib import Path
from mcp_tasks.store.sqlite import SqliteTaskStore
from mcp_tasks.tasks import transitions
from mcp_tasks.tasks.interfaces import Writer

async def main() -> None:
    async with SqliteTaskStore(Path(sys.argv[1])) as store:
        record = await store.get(sys.argv[2])
        await store.compare_and_swap(
            transitions.set_status_message(record, sys.argv[3], datetime.now(UTC)), Writer.EXECUTOR
        )

asyncio.run(main())
"""

_DELETE_RAW = """
import sqlite3, sys
with sqlite3.connect(sys.argv[1]) as db:
    db.execute("DELETE FROM tasks WHERE task_id = ?", (sys.argv[2],))
"""


async def test_polling_an_unchanged_task_runs_no_sql(tmp_path: Path) -> None:
    statements = Statements()
    async with SqliteTaskStore(tmp_path / "t.sqlite3") as store:
        await statements.attach(store)
        created = await store.create(_new())
        statements.clear()
        for _ in range(50):
            assert (await store.get(created.task_id, ALICE)) == created
        assert statements.reads == [] and statements.writes == [], "a poll of an unchanged task reads nothing"

        written = await store.compare_and_swap(
            transitions.set_status_message(created, "half way", NOW), Writer.EXECUTOR
        )
        statements.clear()
        assert (await store.get(created.task_id, ALICE)) == written, "this store's own write is what it reads"
        assert statements.reads == []

        # A write through another connection (another store on the same file) is not this store's: the
        # next read goes to the file, and the one after is answered from memory again.
        async with SqliteTaskStore(tmp_path / "t.sqlite3") as sibling:
            elsewhere = await sibling.compare_and_swap(
                transitions.set_status_message(written, "from a sibling", NOW), Writer.EXECUTOR
            )
        statements.clear()
        assert (await store.get(created.task_id, ALICE)) == elsewhere
        assert len(statements.reads) == 1
        assert (await store.get(created.task_id, ALICE)) == elsewhere
        assert len(statements.reads) == 1, "current again: served from memory"


async def test_a_write_by_another_process_is_seen_by_the_next_get(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite3"
    async with SqliteTaskStore(path) as store:
        created = await store.create(_new())
        assert (await store.get(created.task_id, ALICE)).status_message is None  # kept by this store

        await _run_elsewhere(_SET_MESSAGE, str(path), created.task_id, "written by another process")
        seen = await store.get(created.task_id, ALICE)
        assert seen.status_message == "written by another process" and seen.version == "2"

        finished = await store.compare_and_swap(transitions.complete(seen, {"content": []}, NOW), Writer.EXECUTOR)
        assert (await store.get(created.task_id, ALICE)) == finished

        # Any SQLite writer counts, not only this project's: a row deleted with the sqlite3 module.
        await _run_elsewhere(_DELETE_RAW, str(path), created.task_id)
        with pytest.raises(TaskNotFound):
            await store.get(created.task_id, ALICE)


async def test_a_write_of_ours_and_one_of_another_process_in_between_are_both_seen(tmp_path: Path) -> None:
    """Another process commits between two commits of this store: this store's next commit finds the
    counter ahead of what it expected, forgets what it kept, and every other task is read again."""
    path = tmp_path / "t.sqlite3"
    async with SqliteTaskStore(path) as store:
        first, second = await store.create(_new()), await store.create(_new())
        await _run_elsewhere(_SET_MESSAGE, str(path), second.task_id, "changed elsewhere")
        await store.compare_and_swap(transitions.set_status_message(first, "ours", NOW), Writer.EXECUTOR)
        assert (await store.get(first.task_id, ALICE)).status_message == "ours"
        assert (await store.get(second.task_id, ALICE)).status_message == "changed elsewhere"


async def test_another_principals_cached_task_takes_the_same_query_as_an_unknown_id(tmp_path: Path) -> None:
    """docs/design.md §3: another principal's task behaves exactly like an id that never existed, also in
    what it costs: a task this store keeps is not answered from memory to a caller who does not own it."""
    statements = Statements()
    async with SqliteTaskStore(tmp_path / "t.sqlite3") as store:
        await statements.attach(store)
        created = await store.create(_new())
        await store.get(created.task_id, ALICE)
        unknown = mint_task_id()
        asked: dict[str, list[str]] = {}
        for task_id in (created.task_id, unknown):
            statements.clear()
            with pytest.raises(TaskNotFound):
                await store.get(task_id, MALLORY)
            asked[task_id] = list(statements.reads)
        assert len(asked[unknown]) == 1
        assert asked[created.task_id] == [asked[unknown][0].replace(unknown, created.task_id)]


async def test_a_cached_finished_task_past_its_ttl_is_not_found(tmp_path: Path) -> None:
    now = NOW
    async with SqliteTaskStore(tmp_path / "t.sqlite3", clock=lambda: now) as store:
        created = await store.create(_new())
        finished = await store.compare_and_swap(transitions.complete(created, {"content": []}, NOW), Writer.EXECUTOR)
        assert (await store.get(created.task_id, ALICE)) == finished
        now = finished.expires_at + timedelta(milliseconds=1)
        with pytest.raises(TaskNotFound):
            await store.get(created.task_id, ALICE)
        assert (await store.get(created.task_id)) == finished, "the executor (no owner) still reads it"


def test_the_commit_counter_is_read_only_from_a_consistent_header(tmp_path: Path) -> None:
    """SQLite's readers trust the wal-index header only when its two copies agree and its checksum holds
    (sqlite.org/walformat.html); so does the store: a header caught mid-update reads as unknown (`None`),
    and the caller reads the file."""
    db = sqlite3.connect(tmp_path / "t.sqlite3", isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("CREATE TABLE t (a)")
        found = WalIndex.find(tmp_path / "t.sqlite3")
        assert found is not None
        before = found.changes()
        assert before is not None
        db.execute("INSERT INTO t VALUES (1)")
        assert found.changes() == before + 1, "one commit, one step"
        # Through SQLite's own descriptor: closing one of ours would drop its locks on the file.
        header = os.pread(found._fd, 96, 0)
    finally:
        db.close()
    copies = tmp_path / "copies"
    for name, raw in {
        "good": header,
        "torn": header[:48] + header[48:56] + bytes([header[56] ^ 1]) + header[57:96],
        "bad checksum": header[:40] + bytes([header[40] ^ 1]) + header[41:88] + bytes([header[88] ^ 1]) + header[89:],
        "not initialised": header[:12] + b"\0" + header[13:60] + b"\0" + header[61:],
    }.items():
        copies.write_bytes(raw)
        fd = os.open(copies, os.O_RDONLY)
        try:
            read = WalIndex(fd).changes()
        finally:
            os.close(fd)
        assert (read is not None) == (name == "good"), name
