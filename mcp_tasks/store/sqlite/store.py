"""`SqliteTaskStore`: the embedded default's durable task store (aiosqlite, WAL, `synchronous=FULL`).

`create` returns after the INSERT is committed and fsynced, so a task handle never leaves before
`tasks/get` can read it, even across `kill -9`. Every update is `UPDATE ... WHERE version = ?`
(compare-and-swap). Writes go through one lane (`commits.GroupCommit`): writes that arrive together
share one commit and one fsync, each still answered only once it is committed. Several processes may
share one file; in-process waiters are woken at once, other processes' writes are seen on the next poll.
The store tells its own write observers (`observe`) of each write once it is committed. Backend errors
become domain errors here.

Every read is one `execute_fetchall` (statement run to completion in one step): interleaved open
cursors on the shared read connection would keep its WAL snapshot alive and hide fresh commits.

**Read cache.** `get` of a task this store wrote or read (1,024 kept, bodies up to 16 KiB) is answered
from memory, with no SQL, while no other connection has committed since: the database's commit counter
(`wal_index.WalIndex`, the `-shm` header every SQLite process updates on each commit) must equal the count
this store expects, which each of its own commits advances in commit order (`commits.Committed`). Any
other commit, by another process on the same file or another store in this process, makes the counter
differ: every read is then authoritative until this store's writes have all been applied, and the cache
is emptied and restarted from the counter as read. So a read never returns a state older than the file's
last commit before the read began, as an authoritative read would; a read that raced a commit does not
fill the cache. The owner and expiry checks still apply to each answer, and another principal's cached
task is read from SQL exactly like an unknown id (same query, same cost).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Final, cast

import aiosqlite

from mcp_tasks.observability import metrics
from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.protocol.models import TaskStatus
from mcp_tasks.store.changes import ChangeFeed
from mcp_tasks.store.observers import WriteObservers
from mcp_tasks.store.sqlite.commits import Committed, GroupCommit, Write
from mcp_tasks.store.sqlite.migrations import INDEXES, MIGRATIONS, SCHEMA_VERSION
from mcp_tasks.store.sqlite.wal_index import WalIndex
from mcp_tasks.tasks.errors import StoreUnavailable, TaskNotFound, UnstorableValue
from mcp_tasks.tasks.fair_share import Queued
from mcp_tasks.tasks.ids import TaskId
from mcp_tasks.tasks.interfaces import ClaimView, Clock, Unfinished, WriteObserver, Writer, utc_now
from mcp_tasks.tasks.owner import UNKNOWN_ISSUER, Owner, owns
from mcp_tasks.tasks.record import Lease, LeaseProcess, TaskRecord, from_epoch_ms, to_epoch_ms

logger = logging.getLogger("mcp_tasks.store.sqlite")

DEFAULT_MAX_ROW_BYTES: Final = 1024 * 1024
"""Upper bound of one stored record body, in bytes: a backstop behind the inline-result cap."""

_COLUMNS: Final = (
    "task_id, tenant, subject, issuer, tool, status, created_at_ms, last_updated_at_ms, ttl_ms, expires_at_ms, "
    "lease_holder, lease_expires_at_ms, version, body"
)
_UPDATE: Final = (
    "UPDATE tasks SET tenant=?, subject=?, issuer=?, tool=?, status=?, created_at_ms=?, last_updated_at_ms=?, "
    "ttl_ms=?, expires_at_ms=?, lease_holder=?, lease_expires_at_ms=?, version=?, body=? "
    "WHERE task_id=? AND version=?"
)
_NON_TERMINAL: Final = "('working', 'input_required')"
DECODED_MAX: Final = 1024
"""Most decoded records kept (the read cache, `SqliteTaskStore._decoded`), each with its row; oldest dropped first."""
DECODED_MAX_BODY_BYTES: Final = 16 * 1024
"""Largest record body whose decoded record is kept, in bytes (big results are decoded on each read)."""
_TERMINAL: Final = "('completed', 'failed', 'cancelled')"
_SELECT_AT_VERSION: Final = f"SELECT {_COLUMNS} FROM tasks WHERE task_id = ? AND version = ?"
# Fair share (migration 3): each clause matches a partial index's own WHERE, so SQLite uses it.
_QUEUED: Final = f"status IN {_NON_TERMINAL} AND lease_holder IS NULL"
_LEASED: Final = f"status IN {_NON_TERMINAL} AND lease_holder IS NOT NULL"


def _next_principal(condition: str) -> str:
    return f"(SELECT task_id FROM tasks WHERE {_QUEUED} AND {condition} ORDER BY tenant, subject, issuer LIMIT 1)"


# Each waiting principal's oldest queued tasks: a loose index scan of `tasks_queued` (one seek per principal,
# never a walk of the queue), then at most `?` rows of each principal from the same index.
_WAITING: Final = f"""
WITH RECURSIVE waiting(tenant, subject, issuer) AS (
    SELECT * FROM (SELECT tenant, subject, issuer FROM tasks WHERE {_QUEUED} ORDER BY tenant, subject, issuer LIMIT 1)
    UNION ALL
    SELECT n.tenant, n.subject, n.issuer FROM waiting AS w, tasks AS n WHERE n.task_id = COALESCE(
        {_next_principal("tenant = w.tenant AND subject = w.subject AND issuer > w.issuer")},
        {_next_principal("tenant = w.tenant AND subject > w.subject")},
        {_next_principal("tenant > w.tenant")})
)
"""
_HEADS: Final = f"""
SELECT 1, t.task_id, t.tenant, t.subject, t.issuer, t.created_at_ms, 0
FROM waiting AS w, tasks AS t WHERE t.task_id IN (
    SELECT task_id FROM tasks WHERE {_QUEUED} AND tenant = w.tenant AND subject = w.subject AND issuer = w.issuer
    ORDER BY created_at_ms, task_id LIMIT ?)
"""
_QUEUED_HEADS: Final = _WAITING + _HEADS
# One read for a claim pass: the leased tasks per principal (live, lapsed), then each waiting principal's heads.
_CLAIM_VIEW: Final = (
    _WAITING
    + "SELECT 0, NULL, tenant, subject, issuer, SUM(lease_expires_at_ms > ?), SUM(lease_expires_at_ms <= ?) "
    + f"FROM tasks WHERE {_LEASED} GROUP BY tenant, subject, issuer UNION ALL "
    + _HEADS
)


BODY_FIELDS: Final = frozenset(
    {
        "arguments",
        "statusMessage",
        "progress",
        "pollIntervalMs",
        "inputRequests",
        "issuedInputKeys",
        "inputRoundDigest",
        "inputResponses",
        "takenInputResponses",
        "preInputResponses",
        "clientCapabilities",
        "cancelRequestedAtMs",
        "cancelRequestedBy",
        "result",
        "error",
        "attempt",
        "retentionMs",
        "traceparent",
        "watchedUntilMs",
        "inputWaitMs",
        "inputRequiredSinceMs",
        "leaseProcess",
    }
)
"""The body keys this version reads and writes; any other key a newer version stored is kept as read
(`TaskRecord.unknown_fields`) and written back on every rewrite."""


def _ms(moment: datetime | None) -> int | None:
    return None if moment is None else to_epoch_ms(moment)


def _encode_body(record: TaskRecord) -> str:
    body: JsonObject = {
        **record.unknown_fields,  # a newer version's fields, written back as read (never over this version's)
        "arguments": record.arguments,
        "statusMessage": record.status_message,
        "progress": record.progress,
        "pollIntervalMs": record.poll_interval_ms,
        "inputRequests": record.input_requests,
        "issuedInputKeys": list(record.issued_input_keys),
        "inputRoundDigest": record.input_round_digest,
        "inputResponses": record.input_responses,
        "takenInputResponses": record.taken_input_responses,
        "preInputResponses": record.pre_input_responses,
        "clientCapabilities": record.client_capabilities,
        "cancelRequestedAtMs": _ms(record.cancel_requested_at),
        "cancelRequestedBy": record.cancel_requested_by,
        "result": record.result,
        "error": record.error,
        "attempt": record.attempt,
        "retentionMs": record.retention_ms,
        "traceparent": record.traceparent,
        "watchedUntilMs": _ms(record.watched_until),
        "inputWaitMs": record.input_wait_ms,
        "inputRequiredSinceMs": _ms(record.input_required_since),
        "leaseProcess": None
        if record.lease is None or record.lease.process is None
        else _process_json(record.lease.process),
    }
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False)


def _process_json(process: LeaseProcess) -> JsonObject:
    return {
        "pid": process.pid,
        "identity": process.identity,
        "executionId": process.execution_id,
        "workerPort": process.worker_port,
        **({} if process.warm_endpoint is None else {"warmEndpoint": process.warm_endpoint}),
    }


def _process_of(data: Any) -> LeaseProcess | None:
    if not isinstance(data, dict):
        return None
    return LeaseProcess(
        pid=int(data["pid"]),
        identity=str(data["identity"]),
        execution_id=str(data["executionId"]),
        worker_port=int(data["workerPort"]),
        warm_endpoint=str(data["warmEndpoint"]) if data.get("warmEndpoint") is not None else None,
    )


def _decode_row(row: sqlite3.Row | tuple[Any, ...]) -> TaskRecord:
    (
        task_id,
        tenant,
        subject,
        issuer,
        tool,
        status,
        created,
        updated,
        ttl_ms,
        _exp,
        holder,
        lease_exp,
        version,
        body,
    ) = row
    data = json.loads(body)
    cancel_ms = data.get("cancelRequestedAtMs")
    return TaskRecord(
        task_id=TaskId(task_id),
        owner=Owner(tenant=tenant, subject=subject, issuer=issuer),
        tool=tool,
        arguments=data["arguments"],
        status=TaskStatus(status),
        created_at=from_epoch_ms(created),
        last_updated_at=from_epoch_ms(updated),
        ttl_ms=ttl_ms,
        poll_interval_ms=data["pollIntervalMs"],
        status_message=data.get("statusMessage"),
        progress=data.get("progress"),
        input_requests=data.get("inputRequests") or {},
        issued_input_keys=tuple(data.get("issuedInputKeys") or ()),
        input_round_digest=data.get("inputRoundDigest"),
        input_responses=data.get("inputResponses") or {},
        taken_input_responses=data.get("takenInputResponses") or {},
        pre_input_responses=data.get("preInputResponses") or {},
        client_capabilities=data.get("clientCapabilities"),
        cancel_requested_at=None if cancel_ms is None else from_epoch_ms(cancel_ms),
        cancel_requested_by=data.get("cancelRequestedBy"),
        result=data.get("result"),
        error=data.get("error"),
        lease=None
        if holder is None
        else Lease(holder=holder, expires_at=from_epoch_ms(lease_exp), process=_process_of(data.get("leaseProcess"))),
        attempt=data.get("attempt", 0),
        retention_ms=data.get("retentionMs"),
        traceparent=data.get("traceparent"),
        watched_until=None if data.get("watchedUntilMs") is None else from_epoch_ms(data["watchedUntilMs"]),
        input_wait_ms=data.get("inputWaitMs", 0),
        input_required_since=(
            None if data.get("inputRequiredSinceMs") is None else from_epoch_ms(data["inputRequiredSinceMs"])
        ),
        unknown_fields={key: value for key, value in data.items() if key not in BODY_FIELDS},
        version=str(version),
    )


class SqliteTaskStore:
    """A `TaskStore` on one SQLite file. Use `open()` / `aclose()` (or `async with`).

    Args:
        path: the database file; its folder is created if missing.
        poll_interval_s: how often `wait_for_change` returns on its own, to notice other processes' writes.
        max_row_bytes: largest record body accepted, in bytes.
        clock: source of "now" for expiry checks on reads.
        legacy_issuer: who vouched for the owners of tasks stored before owners named their issuer
            (`tasks.owner.legacy_issuer`); `open` records it on each such row once, so each keeps
            exactly one owner. Empty (`UNKNOWN_ISSUER`): such rows stay readable by nobody.
    """

    def __init__(
        self,
        path: Path,
        poll_interval_s: float = 0.25,
        max_row_bytes: int = DEFAULT_MAX_ROW_BYTES,
        clock: Clock = utc_now,
        legacy_issuer: str = UNKNOWN_ISSUER,
    ) -> None:
        self.path = path
        self.legacy_issuer = legacy_issuer
        self.clock = clock
        self.poll_interval_s = poll_interval_s
        self.max_row_bytes = max_row_bytes
        self._writer: aiosqlite.Connection | None = None
        self._reader: aiosqlite.Connection | None = None
        self._feed = ChangeFeed()
        self._observers = WriteObservers()
        self._wal_index: WalIndex | None = None
        self._commits = GroupCommit(lambda: self._w, lambda: self._wal_index, self._committed)
        # task id → (its row as last read or written, that row decoded). A row equal to the kept one in
        # every column (version, body, ...) decodes to the same record: reuse it (records are immutable).
        # While the commit counter equals `_known`, each entry is also the task's current row (the cache).
        self._decoded: dict[str, tuple[tuple[Any, ...], TaskRecord]] = {}
        self._known: int | None = None  # the commit counter the cache is current at; None: not current

    async def __aenter__(self) -> SqliteTaskStore:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _connect(self) -> aiosqlite.Connection:
        connection = await aiosqlite.connect(self.path, isolation_level=None)
        await connection.execute("PRAGMA busy_timeout = 10000")
        await connection.execute("PRAGMA journal_mode = WAL")
        await connection.execute("PRAGMA synchronous = FULL")
        return connection

    async def open(self) -> None:
        """Open the file (WAL, `synchronous=FULL`) and apply pending migrations."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._writer = await self._connect()
        try:
            await self._migrate(self._writer)
            await self._name_legacy_issuers(self._writer)
            self._reader = await self._connect()
        except BaseException:
            await self.aclose()
            raise
        # After the migration's reads SQLite has the `-shm` file open (it opens it lazily).
        self._wal_index = WalIndex.find(self.path)
        self._known = None if self._wal_index is None else self._wal_index.changes()
        self._commits.start()

    async def aclose(self) -> None:
        """Commit the writes already queued, then close both connections."""
        await self._commits.aclose()
        for connection in (self._reader, self._writer):
            if connection is not None:
                await connection.close()
        self._reader = self._writer = None
        self._wal_index, self._known = None, None
        self._decoded.clear()

    @staticmethod
    async def _migrate(connection: aiosqlite.Connection) -> None:
        rows = list(await connection.execute_fetchall("PRAGMA user_version"))
        current = int(rows[0][0]) if rows else 0
        if current > SCHEMA_VERSION:
            raise RuntimeError(
                f"task database schema v{current} is newer than this build supports (v{SCHEMA_VERSION}); "
                "upgrade mcp-tasks"
            )
        for number in range(current, SCHEMA_VERSION):
            await connection.execute("BEGIN IMMEDIATE")
            try:
                for statement in filter(str.strip, MIGRATIONS[number].split(";")):
                    await connection.execute(statement)
                await connection.execute(f"PRAGMA user_version = {number + 1}")
                await connection.execute("COMMIT")
            except BaseException:
                await connection.execute("ROLLBACK")
                raise
            logger.info("task database migrated to schema v%s", number + 1)
        await connection.execute("BEGIN IMMEDIATE")
        try:
            for statement in INDEXES:
                await connection.execute(statement)
            await connection.execute("COMMIT")
        except BaseException:
            await connection.execute("ROLLBACK")
            raise

    async def _name_legacy_issuers(self, connection: aiosqlite.Connection) -> None:
        """Give every task stored before owners named their issuer the one issuer `legacy_issuer` names."""
        rows = list(await connection.execute_fetchall("SELECT count(*) FROM tasks WHERE issuer = ''"))
        waiting = int(rows[0][0]) if rows else 0
        if not waiting:
            return
        if self.legacy_issuer == UNKNOWN_ISSUER:
            logger.warning(
                "%s task(s) were stored before owners named who vouched for them, and this server trusts several "
                "issuers: they stay readable by nobody until MCPTASKS_LEGACY_OWNER_ISSUER names the one that "
                "created them (docs/security.md, Owners)",
                waiting,
            )
            return
        await connection.execute("BEGIN IMMEDIATE")
        try:
            await connection.execute("UPDATE tasks SET issuer = ? WHERE issuer = ''", (self.legacy_issuer,))
            await connection.execute("COMMIT")
        except BaseException:
            await connection.execute("ROLLBACK")
            raise
        logger.info(
            "%s task(s) stored before owners named their issuer are now owned through %r", waiting, self.legacy_issuer
        )

    @property
    def _w(self) -> aiosqlite.Connection:
        if self._writer is None:
            raise RuntimeError("SqliteTaskStore is not open; call open() first")
        return self._writer

    @property
    def _r(self) -> aiosqlite.Connection:
        if self._reader is None:
            raise RuntimeError("SqliteTaskStore is not open; call open() first")
        return self._reader

    def _decode(self, row: sqlite3.Row | tuple[Any, ...], keep: bool) -> TaskRecord:
        """`_decode_row`, reusing the record decoded from an identical row; kept for later reads if `keep`
        (the row is the current one: `_read_mark` / `_still_current`).
        """
        values = tuple(row)
        kept = self._decoded.get(values[0])
        if kept is not None and kept[0] == values:
            return kept[1]
        record = _decode_row(values)
        if keep:
            self._keep(values, record)
        return record

    def _current(self) -> int | None:
        """The commit counter if the cache is current at it (no commit but this store's, all applied), else
        `None`. Restarts the cache when it is behind other connections' commits and none of ours is pending.
        """
        if self._wal_index is None:
            return None
        now = self._wal_index.changes()
        if now is None or now == self._known:
            return now
        if self._commits.idle:
            # Every commit of ours has been applied, so the difference is other connections' commits: forget
            # all that was kept (any of it may be older) and be current again from this counter on.
            self._decoded.clear()
            self._known = now
        return None

    def _read_mark(self) -> int | None:
        """Before an authoritative read: the counter, if the cache is current (then the read may fill it)."""
        return self._current()

    def _still_current(self, mark: int | None) -> bool:
        """After an authoritative read begun at `mark`: no commit at all happened meanwhile, so its rows are
        the current ones and may be kept.
        """
        return (
            mark is not None
            and self._known == mark
            and self._wal_index is not None
            and (self._wal_index.changes() == mark)
        )

    def _committed(self, committed: Committed) -> None:
        """The lane's report of one of this store's commits (in commit order, before its writers hear):
        apply it to the cache, and advance the counter the cache is current at.
        """
        if committed.before is None or committed.before != self._known:
            self._decoded.clear()  # another connection committed before ours (or the counter was unread)
        for write, rows in committed.writes:
            if write.kind == "delete":
                for row in rows:
                    self._decoded.pop(str(row[0]), None)
            elif write.kept is not None:
                values, record = cast(tuple[tuple[Any, ...], TaskRecord], write.kept)
                self._keep(values, record)
        if committed.before is None:
            self._known = None
        else:
            self._known = (committed.before + committed.changed) & 0xFFFFFFFF

    def _keep(self, values: tuple[Any, ...], record: TaskRecord) -> None:
        if len(values[-1]) > DECODED_MAX_BODY_BYTES:
            self._decoded.pop(values[0], None)
            return
        self._decoded.pop(values[0], None)
        self._decoded[values[0]] = (values, record)
        if len(self._decoded) > DECODED_MAX:
            del self._decoded[next(iter(self._decoded))]

    def _row_values(self, record: TaskRecord, version: int) -> tuple[Any, ...]:
        body = _encode_body(record)
        if len(body) > self.max_row_bytes:
            raise UnstorableValue(
                f"the task's arguments, answers and state would take {len(body)} bytes, too large for the task "
                f"store's limit of {self.max_row_bytes} bytes per task: send less data, or a reference to it"
            )
        return (
            record.task_id,
            record.owner.tenant,
            record.owner.subject,
            record.owner.issuer,
            record.tool,
            record.status.value,
            to_epoch_ms(record.created_at),
            to_epoch_ms(record.last_updated_at),
            record.ttl_ms,
            to_epoch_ms(record.expires_at),
            None if record.lease is None else record.lease.holder,
            None if record.lease is None else to_epoch_ms(record.lease.expires_at),
            version,
            body,
        )

    def observe(self, observer: WriteObserver) -> Callable[[], None]:
        """Call `observer(before, after)` after each write of this store is committed (`TaskStore.observe`);
        returns its remover. Writes of other processes sharing the file are not seen.
        """
        return self._observers.add(observer)

    async def create(self, record: TaskRecord) -> TaskRecord:
        """Insert and commit (fsync) a new record; return it at version 1 (observers hear `(None, it)`)."""
        values = self._row_values(record, 1)
        insert = f"INSERT INTO tasks ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
        created = _replace_version(record, 1)
        await self._commits.write(Write(insert, values, record.task_id, "insert", kept=(values, created)))
        self._feed.changed((record.task_id,))
        self._feed.created((created,))
        self._observers.notify(None, created)
        return created

    async def get(self, task_id: str, owner: Owner | None = None, *, fresh: bool = False) -> TaskRecord:
        """Read one record; foreign, expired and missing tasks all raise `TaskNotFound`.

        From the read cache (no SQL) when it is current and holds the task (module docstring); it is then
        the record as of the file's last commit, as an authoritative read would return. `fresh` always
        reads the file.

        The owner is part of the query (`tenant`/`subject`/`issuer` columns, apart from the body; a row whose
        issuer is unknown matches no one, `tasks.owner.owns`), so another
        principal's task is one primary-key lookup that matches nothing, exactly like an unknown id:
        its body, whatever its size, is never read or decoded (no timing tell). A cached task of another
        principal is not answered from the cache: it takes that same query.
        """
        if not fresh and self._current() is not None:
            kept = self._decoded.get(task_id)
            if kept is not None and (owner is None or owns(kept[1].owner, owner)):
                if owner is not None and kept[1].is_expired(self.clock()):
                    raise TaskNotFound(task_id)
                return kept[1]
        args: tuple[str, ...]
        if owner is None:
            query, args = f"SELECT {_COLUMNS} FROM tasks WHERE task_id = ?", (task_id,)
        else:
            query = (
                f"SELECT {_COLUMNS} FROM tasks "
                "WHERE task_id = ? AND tenant = ? AND subject = ? AND issuer = ? AND issuer <> ''"  # '': nobody's
            )
            args = (task_id, owner.tenant, owner.subject, owner.issuer)
        mark = self._read_mark()
        with _backend("read"):
            rows = await self._r.execute_fetchall(query, args)
        if not rows:
            raise TaskNotFound(task_id)
        record = self._decode(next(iter(rows)), self._still_current(mark))
        if owner is not None and record.is_expired(self.clock()):
            raise TaskNotFound(task_id)
        return record

    async def compare_and_swap(self, record: TaskRecord, writer: Writer) -> TaskRecord:
        """`UPDATE ... WHERE task_id = ? AND version = ?`; raise `VersionConflict` when 0 rows changed.

        One row holds both writers' fields, so `writer` changes nothing here (the Kubernetes store
        writes `spec` or the status subresource by it). Observers hear `(the record at record.version,
        the record written)`: the former from the decoded rows kept, else read in the write's transaction.

        Raises:
            VersionConflict: the record changed since it was read. TaskNotFound: it is gone.
            UnstorableValue: the record is over `max_row_bytes`. StoreUnavailable: SQLite cannot write.
        """
        stored = int(record.version)
        values = self._row_values(record, stored + 1)
        before = self._kept(record.task_id, record.version) if self._observers else None
        read = (_SELECT_AT_VERSION, (record.task_id, stored)) if self._observers and before is None else None
        written = _replace_version(record, stored + 1)
        rows = await self._commits.write(
            Write(_UPDATE, (*values[1:], record.task_id, stored), record.task_id, "update", read, (values, written))
        )
        self._feed.changed((record.task_id,))
        if record.lease is None and not record.status.is_terminal:
            self._feed.created((written,))  # runnable again (a re-run, a cancel before any claim): wake the claimer
        if read is not None and rows:
            before = _decode_row(rows[0])
        if before is not None:
            self._observers.notify(before, written)
        return written

    def _kept(self, task_id: str, version: str) -> TaskRecord | None:
        """The decoded record of `task_id` at `version` if it is kept, else `None`."""
        kept = self._decoded.get(task_id)
        return kept[1] if kept is not None and kept[1].version == version else None

    async def list_runnable(self, now: datetime, limit: int) -> Sequence[TaskRecord]:
        """Non-terminal tasks without a live lease, oldest first."""
        mark = self._read_mark()
        with _backend("read"):
            rows = await self._r.execute_fetchall(
                f"SELECT {_COLUMNS} FROM tasks WHERE status IN {_NON_TERMINAL} "
                "AND (lease_expires_at_ms IS NULL OR lease_expires_at_ms <= ?) ORDER BY created_at_ms LIMIT ?",
                (to_epoch_ms(now), limit),
            )
        keep = self._still_current(mark)
        return [self._decode(row, keep) for row in rows]

    async def delete_expired(self, now: datetime, limit: int) -> Sequence[str]:
        """Delete terminal tasks past `created_at + ttl_ms`; return their ids."""
        delete = (
            f"DELETE FROM tasks WHERE task_id IN (SELECT task_id FROM tasks WHERE status IN {_TERMINAL} "
            "AND expires_at_ms <= ? LIMIT ?) RETURNING task_id"
        )
        rows = await self._commits.write(Write(delete, (to_epoch_ms(now), limit), "", "delete"))
        deleted = [str(row[0]) for row in rows]  # already dropped from the cache (`_committed`)
        if deleted:
            self._feed.changed(deleted)
        return deleted

    async def wait_for_change(self, timeout_s: float, task_id: str | None = None) -> None:
        """Wait for a write by this process (to `task_id`, or to any task), or `min(timeout_s, poll_interval_s)`.

        The bounded wait is how other processes' writes are noticed.
        """
        await self._feed.wait_for_change(min(timeout_s, self.poll_interval_s), task_id)

    def take_runnable(self) -> list[TaskRecord] | None:
        """The records this process wrote runnable since the last call (created, or reset for a re-run:
        unfinished, no lease), as committed, oldest first.

        `None` when some were not kept (`changes.MAX_CREATED`): query `list_runnable` instead. Other
        processes' writes are never here. For the runner's claim loop (`runner.claims`), which claims them
        without a query; each claim is still a compare-and-swap on the version handed over.
        """
        return self._feed.take_created()

    async def wait_for_new_tasks(self, timeout_s: float) -> None:
        """Wait for a task created by this process, or `timeout_s` seconds (other processes' are found by polling)."""
        await self._feed.wait_for_new_tasks(timeout_s)

    async def unfinished(self) -> Unfinished:
        """Non-terminal tasks by status and the oldest one's creation, from the columns (no body is read)."""
        with _backend("read"):
            rows = await self._r.execute_fetchall(
                f"SELECT status, COUNT(*), MIN(created_at_ms) FROM tasks WHERE status IN {_NON_TERMINAL} "
                "GROUP BY status"
            )
        counts = {str(status): int(count) for status, count, _ in rows}
        oldest = min((int(first) for _, _, first in rows), default=None)
        return Unfinished(counts, None if oldest is None else from_epoch_ms(oldest))

    async def count(self) -> int:
        """Number of stored records (any status); for operators and benchmarks."""
        with _backend("read"):
            rows = list(await self._r.execute_fetchall("SELECT COUNT(*) FROM tasks"))
        return int(rows[0][0]) if rows else 0

    # Fair share (`interfaces.FairQueue`): every query is an index range of migration 3's indexes.

    async def running_usage(self, now: datetime) -> list[tuple[Owner, int]]:
        """`(principal, runs)` of the unfinished tasks under a live lease (any holder); O(running)."""
        with _backend("read"):
            rows = await self._r.execute_fetchall(
                f"SELECT tenant, subject, issuer, COUNT(*) FROM tasks WHERE {_LEASED} AND lease_expires_at_ms > ? "
                "GROUP BY tenant, subject, issuer",
                (to_epoch_ms(now),),
            )
        return [(Owner(str(tenant), str(subject), str(issuer)), int(runs)) for tenant, subject, issuer, runs in rows]

    async def queued_heads(self, per_principal: int) -> list[Queued]:
        """The oldest `per_principal` queued tasks (unfinished, never leased) of each principal that has any.

        Columns only, no body; O(principals waiting x `per_principal`) index steps, whatever the queue's length.
        """
        with _backend("read"):
            rows = await self._r.execute_fetchall(_QUEUED_HEADS, (per_principal,))
        return [
            Queued(str(task_id), Owner(str(tenant), str(subject), str(issuer)), from_epoch_ms(int(created)))
            for _, task_id, tenant, subject, issuer, created, _ in rows
        ]

    async def claim_view(self, now: datetime, per_principal: int) -> ClaimView:
        """`running_usage`, how many leases lapsed, and `queued_heads`, in one read (a claim pass's question)."""
        at = to_epoch_ms(now)
        with _backend("read"):
            rows = await self._r.execute_fetchall(_CLAIM_VIEW, (at, at, per_principal))
        running: list[tuple[Owner, int]] = []
        queued: list[Queued] = []
        lapsed = 0
        for kind, task_id, tenant, subject, issuer, value, expired in rows:
            owner = Owner(str(tenant), str(subject), str(issuer))
            if kind == 0:
                if value:
                    running.append((owner, int(value)))
                lapsed += int(expired or 0)
            else:
                queued.append(Queued(str(task_id), owner, from_epoch_ms(int(value))))
        return ClaimView(running, lapsed, queued)

    async def lapsed(self, now: datetime, limit: int) -> list[TaskRecord]:
        """Unfinished tasks whose lease has expired (their holder is gone), oldest first, at most `limit`;
        O(leased tasks).
        """
        mark = self._read_mark()
        with _backend("read"):
            rows = await self._r.execute_fetchall(
                f"SELECT {_COLUMNS} FROM tasks INDEXED BY tasks_leased WHERE {_LEASED} AND lease_expires_at_ms <= ? "
                "ORDER BY created_at_ms LIMIT ?",
                (to_epoch_ms(now), limit),
            )
        keep = self._still_current(mark)
        return [self._decode(row, keep) for row in rows]

    async def queued_records(self, task_ids: Sequence[str]) -> list[TaskRecord]:
        """The records of `task_ids` that are still queued, in the order given (one primary-key read each)."""
        if not task_ids:
            return []
        mark = self._read_mark()
        with _backend("read"):
            rows = await self._r.execute_fetchall(
                f"SELECT {_COLUMNS} FROM tasks WHERE task_id IN ({','.join('?' * len(task_ids))}) AND {_QUEUED}",
                tuple(task_ids),
            )
        keep = self._still_current(mark)
        found: dict[str, TaskRecord] = {record.task_id: record for record in (self._decode(row, keep) for row in rows)}
        return [found[task_id] for task_id in task_ids if task_id in found]

    async def unfinished_of(self, owner: Owner, at_most: int) -> int:
        """How many unfinished tasks `owner` holds (queued or leased), counted up to `at_most`; O(`at_most`)."""
        where = "tenant = ? AND subject = ? AND issuer = ?"
        key = (owner.tenant, owner.subject, owner.issuer)
        with _backend("read"):
            rows = list(
                await self._r.execute_fetchall(
                    f"SELECT (SELECT COUNT(*) FROM (SELECT 1 FROM tasks WHERE {_QUEUED} AND {where} LIMIT ?)) + "
                    f"(SELECT COUNT(*) FROM (SELECT 1 FROM tasks WHERE {_LEASED} AND {where} LIMIT ?))",
                    (*key, at_most, *key, at_most),
                )
            )
        return min(int(rows[0][0]), at_most) if rows else 0

    async def queued_ahead(self, record: TaskRecord, at_most: int) -> int:
        """How many queued tasks of `record`'s tenant were created before it, counted up to `at_most`."""
        with _backend("read"):
            rows = list(
                await self._r.execute_fetchall(
                    f"SELECT COUNT(*) FROM (SELECT 1 FROM tasks WHERE {_QUEUED} AND tenant = ? AND "
                    "(created_at_ms < ? OR (created_at_ms = ? AND task_id < ?)) LIMIT ?)",
                    (record.owner.tenant, created := to_epoch_ms(record.created_at), created, record.task_id, at_most),
                )
            )
        return int(rows[0][0]) if rows else 0

    async def running_of(self, owner: Owner, now: datetime) -> tuple[int, int]:
        """Runs under a live lease of `owner`'s tenant and of `owner` itself; O(the tenant's leased tasks)."""
        with _backend("read"):
            rows = list(
                await self._r.execute_fetchall(
                    "SELECT COUNT(*), COALESCE(SUM(subject = ? AND issuer = ?), 0) FROM tasks "
                    f"WHERE {_LEASED} AND tenant = ? AND lease_expires_at_ms > ?",
                    (owner.subject, owner.issuer, owner.tenant, to_epoch_ms(now)),
                )
            )
        return (int(rows[0][0]), int(rows[0][1])) if rows else (0, 0)

    async def tenant_counts(self) -> dict[str, tuple[int, int]]:
        """Tenant → (queued, leased) unfinished tasks, for the metrics (`mcptasks_tasks_queued`/`_running`)."""
        with _backend("read"):
            queued = await self._r.execute_fetchall(
                f"SELECT tenant, COUNT(*) FROM tasks WHERE {_QUEUED} GROUP BY tenant"
            )
            leased = await self._r.execute_fetchall(
                f"SELECT tenant, COUNT(*) FROM tasks WHERE {_LEASED} GROUP BY tenant"
            )
        counts: dict[str, tuple[int, int]] = {str(tenant): (int(n), 0) for tenant, n in queued}
        for tenant, n in leased:
            counts[str(tenant)] = (counts.get(str(tenant), (0, 0))[0], int(n))
        return counts


@contextlib.contextmanager
def _backend(action: str) -> Iterator[None]:
    """Translate SQLite's operational failures into `StoreUnavailable` at the store's edge.

    Disk full, a read-only file system, an I/O error or a lock held past `busy_timeout` are conditions of
    the machine, not of the request: the gateway answers them 503 with `Retry-After`, the runner retries.
    Integrity errors are the caller's to handle and pass through.
    """
    done = metrics.timed("sqlite", action)
    try:
        yield
    except sqlite3.IntegrityError:
        raise
    except sqlite3.DatabaseError as exc:  # OperationalError (full, read-only, I/O, locked) and kin
        raise StoreUnavailable(f"the task database cannot {action}: {exc}") from exc
    finally:
        done()


def _replace_version(record: TaskRecord, version: int) -> TaskRecord:
    return dataclasses.replace(record, version=str(version))
