"""Schema migrations of the SQLite task store, applied in order and tracked in `PRAGMA user_version`.

Append a new script to `MIGRATIONS` to change the schema; never edit one that has shipped. A build refuses a
file whose version is newer than its own, so a version bump is a one-way door for a rollback: anything an
older build can live with (an index, which changes no row it reads or writes, and which SQLite keeps current
on that build's writes too) goes in `INDEXES` instead, created at every open where missing, no bump.
"""

from __future__ import annotations

from typing import Final

MIGRATIONS: Final[tuple[str, ...]] = (
    # 1: the task table. Indexed columns are the ones queries filter on; the rest is one JSON body.
    """
    CREATE TABLE tasks (
        task_id              TEXT PRIMARY KEY,
        tenant               TEXT NOT NULL,
        subject              TEXT NOT NULL,
        tool                 TEXT NOT NULL,
        status               TEXT NOT NULL,
        created_at_ms        INTEGER NOT NULL,
        last_updated_at_ms   INTEGER NOT NULL,
        ttl_ms               INTEGER NOT NULL,
        expires_at_ms        INTEGER NOT NULL,
        lease_holder         TEXT,
        lease_expires_at_ms  INTEGER,
        version              INTEGER NOT NULL,
        body                 TEXT NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX tasks_runnable ON tasks (created_at_ms)
        WHERE status IN ('working', 'input_required');
    CREATE INDEX tasks_expiry ON tasks (expires_at_ms)
        WHERE status IN ('completed', 'failed', 'cancelled');
    """,
    # 2: who vouched for each task's owner (tasks.owner). Rows of schema 1 get '' (no issuer known); the
    # store names their one issuer at open (`SqliteTaskStore.legacy_issuer`) or leaves them to nobody.
    """
    ALTER TABLE tasks ADD COLUMN issuer TEXT NOT NULL DEFAULT ''
    """,
)

SCHEMA_VERSION: Final = len(MIGRATIONS)

INDEXES: Final[tuple[str, ...]] = (
    # Fair share (tasks.fair_share). Queued tasks (unfinished, never leased or reset) by principal and by
    # tenant in creation order, and leased ones by principal: each principal's oldest queued tasks, what
    # runs per principal and a queued task's place among its tenant's are index ranges, never a queue scan.
    """
    CREATE INDEX IF NOT EXISTS tasks_queued ON tasks (tenant, subject, issuer, created_at_ms)
        WHERE status IN ('working', 'input_required') AND lease_holder IS NULL
    """,
    """
    CREATE INDEX IF NOT EXISTS tasks_queued_tenant ON tasks (tenant, created_at_ms)
        WHERE status IN ('working', 'input_required') AND lease_holder IS NULL
    """,
    """
    CREATE INDEX IF NOT EXISTS tasks_leased ON tasks (tenant, subject, issuer, lease_expires_at_ms)
        WHERE status IN ('working', 'input_required') AND lease_holder IS NOT NULL
    """,
)
"""Indexes of the current schema version that older builds of it can open a file with (module docstring)."""
