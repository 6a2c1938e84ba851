"""`WriteObservers`: the observers one task store tells of its durable writes, owned by that store.

Each store (`SqliteTaskStore`, `KubernetesTaskStore`) keeps one and calls `notify` after every write it
made durable (a create, a compare-and-swap), so no caller has to remember to report its writes. The
composition that builds a store registers what must hear of them (`TaskStore.observe`): the metrics
(`observability.metrics.record_write`), the operator's Events. Observers are plain synchronous callables
run in registration order on the writer's task; they must be quick, and one that raises is logged and
skipped: it never fails the write, which is already durable.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from mcp_tasks.tasks.interfaces import WriteObserver
from mcp_tasks.tasks.record import TaskRecord

logger = logging.getLogger("mcp_tasks.store")


class WriteObservers:
    """A store's registry of `WriteObserver`s (see the module docstring)."""

    def __init__(self) -> None:
        self._observers: list[WriteObserver] = []

    def __bool__(self) -> bool:
        """Whether anyone listens (a store may skip work, such as finding the record before, when nobody does)."""
        return bool(self._observers)

    def add(self, observer: WriteObserver) -> Callable[[], None]:
        """Register `observer`; return the function that removes it (removing twice is harmless)."""
        self._observers.append(observer)

        def remove() -> None:
            if observer in self._observers:
                self._observers.remove(observer)

        return remove

    def notify(self, before: TaskRecord | None, after: TaskRecord) -> None:
        """Tell every observer that `after` is durably written (`before` is `None` for a create).

        An observer that raises is logged with its traceback and the others are still told.
        """
        for observer in tuple(self._observers):
            try:
                observer(before, after)
            except Exception:
                logger.exception("task write observer %r failed", observer)


__all__ = ["WriteObservers"]
