"""Structured logs: every line about a task carries `taskId` and `tool` (in `--log-json` mode, as fields).

The code that works on one task binds it (`bind_task` for a whole asyncio task, such as a runner's
supervisor or a worker API request; `task_context` for a block, such as one reconcile). Python copies
context variables into each new asyncio task, so a binding never leaks into another task's work. The
`TaskFields` filter then copies the binding onto every log record, and `JsonFormatter` writes them.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Final

_TASK: Final[ContextVar[tuple[str, str | None] | None]] = ContextVar("mcp_tasks_log_task", default=None)

FIELDS: Final = ("taskId", "tool", "tenant", "method", "subject", "issuer", "mechanism", "outcome", "audit")
"""Record attributes the JSON formatter writes when present (`extra=` or a binding)."""


def bind_task(task_id: str | None, tool: str | None = None) -> None:
    """Bind `task_id` (and `tool`) to every later log line of the current asyncio task."""
    _TASK.set(None if task_id is None else (task_id, tool))


@contextlib.contextmanager
def task_context(task_id: str, tool: str | None = None) -> Iterator[None]:
    """Bind `task_id` (and `tool`) to the log lines written inside the block."""
    token = _TASK.set((task_id, tool))
    try:
        yield
    finally:
        _TASK.reset(token)


class TaskFields(logging.Filter):
    """Adds the bound `taskId` and `tool` to a log record that does not name them itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        bound = _TASK.get()
        if bound is not None and bound[0]:
            task_id, tool = bound
            if "taskId" not in record.__dict__:
                record.taskId = task_id
            if tool is not None and "tool" not in record.__dict__:
                record.tool = tool
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: `ts`, `level`, `logger`, `msg`, the `FIELDS` present, `exc`."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {"ts": self.formatTime(record), "level": record.levelname, "logger": record.name}
        entry["msg"] = record.getMessage()
        for key in FIELDS:
            if key in record.__dict__:
                entry[key] = record.__dict__[key]
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry)
