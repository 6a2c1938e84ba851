"""`GroupCommit`: the SQLite store's one write lane; writes that arrive together share one commit (one fsync).

`SqliteTaskStore` sends every write here: INSERT, compare-and-swap UPDATE, and the expiry DELETE. A
write that finds the lane idle is committed on its own, by its caller (without a hop through the lane's
task); writes that queue up while a commit is in flight are drained by the lane's own asyncio task into
the next transaction together. Each is one transaction (`BEGIN IMMEDIATE`, each statement, `COMMIT`), so 32
clients creating tasks, a claim pass over 16 tasks and the results of runs that end together cost one
fsync per batch instead of one each.

Each transaction also reads the database's commit counter (`wal_index.WalIndex`) while it holds the write
lock, and the lane tells the store (`Committed`, through `on_commit`) which counter value its commit made,
before any writer is answered: the store's read cache follows the commits in the order they were made.

Durability is unchanged: a write's caller is answered only after the `COMMIT` that holds it returned
(`synchronous=FULL`: fsynced), and a batch that cannot commit is rolled back and every write in it is
refused (`StoreUnavailable`), so nothing is acknowledged that a crash could lose. Each statement keeps
its own outcome: a conflicting compare-and-swap (0 rows) or a taken id fails that write alone, never
its batch-mates.

Called only by `SqliteTaskStore`; never reads for a caller, never decides what to write.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeVar, cast

import aiosqlite

from mcp_tasks.observability import metrics
from mcp_tasks.store.sqlite.wal_index import WalIndex
from mcp_tasks.tasks.errors import StoreUnavailable, TaskNotFound, VersionConflict

logger = logging.getLogger("mcp_tasks.store.sqlite")

MAX_BATCH: Final = 256
"""Most writes committed in one transaction; more wait for the next (keeps a transaction short)."""


@dataclass(slots=True, eq=False)
class Write:
    """One statement to commit.

    Attributes:
        sql: the statement, with `?` placeholders.
        params: its parameters.
        task_id: the task it writes (named in errors; empty for `delete`).
        kind: `insert` (a taken id is a conflict); `update` (`... WHERE version = ?`: 0 rows changed is a
            conflict, or the task is gone); `delete` (`... RETURNING`: its rows are the answer).
        read: for an `update`, a `SELECT` (and its parameters) run just before it in the same transaction;
            its rows are the answer of an update that changed a row (the row as it was before the write).
        kept: what the store keeps of an `insert` or `update` once committed (its row values and the
            record they hold), handed back in `Committed.writes`; the lane does not look at it.
        done: answered once the write is committed (or refused): the rows a `delete` returned, or an
            update's `read`, else `[]`.
    """

    sql: str
    params: tuple[Any, ...]
    task_id: str
    kind: Literal["insert", "update", "delete"]
    read: tuple[str, tuple[Any, ...]] | None = None
    kept: object = None
    done: asyncio.Future[list[Any]] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


@dataclass(frozen=True, slots=True)
class Committed:
    """One committed transaction of the lane, as `on_commit` hears it (before any of its writers is answered).

    Attributes:
        before: the database's commit counter (`WalIndex.changes`) when the transaction took the write lock,
            so every commit before it, of any process, is counted; `None` if it could not be read.
        changed: the transaction changed a row (so its `COMMIT` moved the counter from `before` to
            `before + 1`); `False` for a batch of conflicting compare-and-swaps only.
        writes: the writes that took effect, each with its answer (a `delete`'s rows).
    """

    before: int | None
    changed: bool
    writes: list[tuple[Write, list[Any]]]


class GroupCommit:
    """The write lane of one SQLite connection (see the module docstring). Use `start()` / `aclose()`.

    Args:
        connection: the store's write connection (autocommit: `isolation_level=None`); it must not be
            written through anything else while the lane runs.
        wal_index: the database's commit counter, read in each transaction (`None`: not read).
        on_commit: called in the event loop with each committed transaction, before its writers are
            answered; it must not raise.
    """

    def __init__(
        self,
        connection: Callable[[], aiosqlite.Connection],
        wal_index: Callable[[], WalIndex | None] = lambda: None,
        on_commit: Callable[[Committed], None] = lambda committed: None,
    ) -> None:
        self._connection = connection
        self._wal_index = wal_index
        self._on_commit = on_commit
        self._queue: list[Write] = []
        self._queued = asyncio.Event()
        self._closing = False
        self._busy = False  # a commit is in flight (the lane's, or an idle lane's caller's own)
        self._task: asyncio.Task[None] | None = None

    @property
    def idle(self) -> bool:
        """No write of this lane is queued, in flight, or committed without `on_commit` having heard of it."""
        return not self._busy and not self._queue

    def start(self) -> None:
        """Start the lane's task (the owner of every commit)."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name="sqlite-group-commit")

    async def aclose(self) -> None:
        """Commit what is queued, then stop; later writes raise `RuntimeError`."""
        self._closing = True
        self._queued.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def write(self, write: Write) -> list[Any]:
        """Queue `write` and return once it is committed (fsynced): the rows a `delete` or an update's
        `read` returned, else `[]`.

        Raises:
            VersionConflict: an `UPDATE` changed no row although the task exists (it changed meanwhile),
                or an `INSERT` found the id taken.
            TaskNotFound: an `UPDATE`'s task is gone.
            StoreUnavailable: SQLite cannot write (disk full, read-only, I/O error, lock held past
                `busy_timeout`); nothing of the batch was committed.
            RuntimeError: the store is closed.
        """
        if self._closing or self._task is None or self._task.done():
            raise RuntimeError("SqliteTaskStore is not open; call open() first")
        if self._busy or self._queue:
            self._queue.append(write)
            self._queued.set()
            return await write.done
        # The lane is idle: commit this write here, without a hop through the lane's task; writes that
        # arrive meanwhile queue up for the lane's next batch.
        self._busy = True
        try:
            await self._guarded([write])
        except asyncio.CancelledError:
            if write.done.done() and not write.done.cancelled():
                write.done.exception()  # its caller is gone: mark the answer read (no "never retrieved" log)
            raise
        finally:
            self._busy = False
            if self._queue:
                self._queued.set()
        return await write.done

    async def _run(self) -> None:
        while True:
            await self._queued.wait()
            self._queued.clear()
            while self._queue and not self._busy:  # busy: a caller commits; it wakes the lane when done
                batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
                self._busy = True
                try:
                    await self._guarded(batch)
                finally:
                    self._busy = False
            if self._closing and not self._queue:
                return

    async def _guarded(self, batch: list[Write]) -> None:
        """`_commit`, and whatever else goes wrong, every write of `batch` still gets an answer."""
        try:
            await self._commit(batch)
        except asyncio.CancelledError:
            _refuse(batch, "the task store is closing")
            raise
        except Exception as exc:  # not SQLite's refusal (handled in `_commit`): a bug, a closed connection
            logger.exception("task database write batch failed")
            _refuse(batch, f"the task database cannot write: {exc!r}")

    async def _commit(self, batch: list[Write]) -> None:
        """Commit `batch` in one transaction, tell `on_commit`, then answer each write.

        The whole batch runs in one hop to the connection's thread (`_in_thread`): awaiting each statement
        would cost a round trip through a busy event loop per statement, and the batch's transaction
        would stay open that long.
        """
        connection = self._connection()
        statements: list[_Statement] = [
            (write.sql, write.params, write.kind, write.task_id, write.read) for write in batch
        ]
        wal_index = self._wal_index()
        done = metrics.timed("sqlite", "write")
        try:
            before, changed, outcomes = await _in_thread(
                connection, lambda raw: _commit_in_thread(raw, statements, wal_index)
            )
        except sqlite3.DatabaseError as exc:  # OperationalError (full, read-only, I/O, locked) and kin
            _refuse(batch, f"the task database cannot write: {exc}")
            return
        finally:
            done()
        took = [(w, o) for w, o in zip(batch, outcomes, strict=True) if not isinstance(o, BaseException)]
        self._on_commit(Committed(before, changed, took))
        for write, outcome in zip(batch, outcomes, strict=True):
            if isinstance(outcome, VersionConflict) and write.kind == "update":
                metrics.STORE_CONFLICTS.labels("sqlite").inc()
            if write.done.done():  # its caller was cancelled; the write stands, as a single write would
                continue
            if isinstance(outcome, BaseException):
                write.done.set_exception(outcome)
            else:
                write.done.set_result(outcome)


def _refuse(batch: list[Write], why: str) -> None:
    """Answer every still-waiting write of `batch` with `StoreUnavailable(why)` (nothing of it was acknowledged)."""
    for write in batch:
        if not write.done.done():
            write.done.set_exception(StoreUnavailable(why))


_Statement = tuple[str, tuple[Any, ...], str, str, tuple[str, tuple[Any, ...]] | None]
"""`(sql, params, kind, task_id, read)` of one `Write`, as the connection's thread sees it (no futures)."""
_Outcome = BaseException | list[Any]
T = TypeVar("T")


async def _in_thread(connection: aiosqlite.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
    """Run `work(raw connection)` in `connection`'s own thread, in its queue order (one round trip).

    aiosqlite has no public call for this; `_execute` is the one its own methods use, and the raw
    `sqlite3` connection may only be used from that thread.
    """
    run = cast(Callable[[Callable[[], T]], Awaitable[T]], connection._execute)  # untyped in aiosqlite
    return await run(lambda: work(connection._conn))


def _commit_in_thread(
    raw: sqlite3.Connection, statements: list[_Statement], wal_index: WalIndex | None
) -> tuple[int | None, bool, list[_Outcome]]:
    """In the connection's thread: run `statements` in one transaction and commit it.

    Returns the commit counter read under the write lock (`None` if not read), whether the commit moved it
    (a row changed and the counter did move: a statement that rewrites a row unchanged writes no page, and
    no commit of ours does that, but then nothing is claimed), and each statement's outcome.

    Raises:
        sqlite3.DatabaseError: the batch cannot be written or committed; it was rolled back.
    """
    raw.execute("BEGIN IMMEDIATE")
    try:
        # Under the write lock no other connection can commit: the counter counts every commit before ours.
        before = None if wal_index is None else wal_index.changes()
        rows_before = raw.total_changes
        outcomes = [_apply(raw, statement) for statement in statements]
        changed = raw.total_changes != rows_before
        raw.execute("COMMIT")
    except BaseException:
        if raw.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                raw.execute("ROLLBACK")
        raise
    if changed and before is not None:
        after = wal_index.changes() if wal_index is not None else None
        if after is None or after == before:  # not moved (or unreadable): claim nothing, the store re-reads
            return None, False, outcomes
    return before, changed, outcomes


def _apply(raw: sqlite3.Connection, statement: _Statement) -> _Outcome:
    """Run one statement; its answer, or its own failure (a conflict, a missing task), returned not raised."""
    sql, params, kind, task_id, read = statement
    if kind == "delete":
        return raw.execute(sql, params).fetchall()
    before = [] if read is None else raw.execute(*read).fetchall()
    try:
        cursor = raw.execute(sql, params)
    except sqlite3.IntegrityError:
        return VersionConflict(f"task {task_id} already exists")
    if kind == "insert" or cursor.rowcount > 0:
        return before
    if raw.execute("SELECT 1 FROM tasks WHERE task_id = ?", (task_id,)).fetchone() is None:
        return TaskNotFound(task_id)
    return VersionConflict(f"task {task_id} changed since it was read")
