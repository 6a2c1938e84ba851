"""SQLite task store of the embedded default (aiosqlite; WAL; `synchronous=FULL`)."""

from mcp_tasks.store.sqlite.store import SqliteTaskStore

__all__ = ["SqliteTaskStore"]
