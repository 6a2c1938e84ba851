"""The SQLite store tells the observers registered on it of each durable write (no caller reports writes):
`(None, created)` after a create, `(before, written)` after a compare-and-swap, on a real file."""

from __future__ import annotations

import dataclasses
import logging
from datetime import UTC, datetime
from pathlib import Path

import pytest

from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.store.manifests import load_manifest_file
from mcp_tasks.store.sqlite import SqliteTaskStore
from mcp_tasks.store.sqlite.store import DECODED_MAX_BODY_BYTES
from mcp_tasks.tasks import transitions
from mcp_tasks.tasks.errors import VersionConflict
from mcp_tasks.tasks.ids import mint_task_id
from mcp_tasks.tasks.interfaces import Writer, transact
from mcp_tasks.tasks.owner import Owner
from mcp_tasks.tasks.record import TaskRecord
from tests.conftest import REPO

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
Heard = list[tuple[TaskRecord | None, TaskRecord]]


def _new(arguments: JsonObject | None = None) -> TaskRecord:
    tool = load_manifest_file(REPO / "conformance" / "tools" / "fixtures.yaml")[0]
    return transitions.new_task(mint_task_id(), Owner("a", "b", "static"), tool, arguments or {}, NOW)


async def test_each_write_is_told_to_the_observers_of_the_store_that_made_it(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite3"
    heard: Heard = []
    elsewhere: Heard = []
    async with SqliteTaskStore(path) as store, SqliteTaskStore(path) as sibling:
        store.observe(lambda before, after: heard.append((before, after)))
        sibling.observe(lambda before, after: elsewhere.append((before, after)))
        created = await store.create(_new())
        assert heard == [(None, created)]
        written, _ = await transact(
            store, created.task_id, lambda r: (transitions.set_status_message(r, "one", NOW), None), Writer.EXECUTOR
        )
        assert heard[1] == (created, written) and written.version == "2"
        with pytest.raises(VersionConflict):
            await store.compare_and_swap(dataclasses.replace(created, status_message="stale"), Writer.EXECUTOR)
        assert len(heard) == 2, "a refused write is told to nobody"
        assert elsewhere == [], "another store on the same file does not tell of this store's writes"
        await sibling.compare_and_swap(dataclasses.replace(written, status_message="two"), Writer.EXECUTOR)
        assert [after.status_message for _, after in elsewhere] == ["two"] and len(heard) == 2


async def test_the_record_before_is_read_in_the_write_when_it_is_not_kept(tmp_path: Path) -> None:
    """A record too large to keep decoded (or last read by another process) is read in the write's own
    transaction: the observer still gets the row the compare-and-swap replaced."""
    heard: Heard = []
    big: JsonObject = {"blob": "x" * (DECODED_MAX_BODY_BYTES + 1)}
    async with SqliteTaskStore(tmp_path / "t.sqlite3") as store:
        created = await store.create(_new(big))
        assert store._kept(created.task_id, created.version) is None
        store.observe(lambda before, after: heard.append((before, after)))
        asked = dataclasses.replace(created, status_message="asked")
        written = await store.compare_and_swap(asked, Writer.EXECUTOR)
    ((before, after),) = heard
    assert before == created and before.arguments == big
    assert after == written and after.status_message == "asked" and after.version == "2"


async def test_an_observer_that_raises_is_logged_and_fails_no_write(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "t.sqlite3"
    heard: Heard = []

    def broken(before: TaskRecord | None, after: TaskRecord) -> None:
        raise RuntimeError("observer bug")

    async with SqliteTaskStore(path) as store:
        store.observe(broken)
        remove = store.observe(lambda before, after: heard.append((before, after)))
        with caplog.at_level(logging.ERROR, logger="mcp_tasks.store"):
            created = await store.create(_new())
            done = await store.compare_and_swap(transitions.cancel(created, NOW), Writer.EXECUTOR)
        assert [after for _, after in heard] == [created, done], "the next observers are still told"
        assert [r.getMessage() for r in caplog.records].count(f"task write observer {broken!r} failed") == 2
        remove()
        remove()  # twice is harmless
        await store.create(_new())
        assert len(heard) == 2
    async with SqliteTaskStore(path) as reopened:  # the writes stood, on the file
        assert (await reopened.get(created.task_id)) == done
