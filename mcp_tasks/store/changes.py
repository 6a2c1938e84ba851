"""`ChangeFeed`: in-process wake-ups for waiters on task changes, shared by both task stores.

Backs `TaskStore.wait_for_change` and `wait_for_new_tasks`: a writer (or a watch event) calls
`changed(task_ids)` / `created()`; waiters on one task are woken only by changes to that task, waiters
on "any task" by every change. Spurious wake-ups are allowed (callers re-read), lost ones are not:
each event is replaced when it fires, so a waiter always waits on an event that has not fired yet.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable


class ChangeFeed:
    """Per-task and any-task change events plus a new-task event."""

    def __init__(self) -> None:
        self._any = asyncio.Event()
        self._per_task: dict[str, asyncio.Event] = {}
        self._created = asyncio.Event()

    def changed(self, task_ids: Iterable[str]) -> None:
        """Wake waiters on any task and on each of `task_ids` (waiters on other tasks stay asleep)."""
        self._any.set()
        self._any = asyncio.Event()
        for task_id in task_ids:
            event = self._per_task.pop(task_id, None)
            if event is not None:
                event.set()

    def created(self) -> None:
        """Wake waiters for new tasks."""
        self._created.set()
        self._created = asyncio.Event()

    async def wait_for_change(self, timeout_s: float, task_id: str | None = None) -> None:
        """Return when `task_id` (or any task) changed, or after `timeout_s` seconds."""
        event = self._any if task_id is None else self._per_task.setdefault(task_id, asyncio.Event())
        await _wait(event, timeout_s)

    async def wait_for_new_tasks(self, timeout_s: float) -> None:
        """Return when a task was created, or after `timeout_s` seconds."""
        await _wait(self._created, timeout_s)


async def _wait(event: asyncio.Event, timeout_s: float) -> None:
    try:
        async with asyncio.timeout(timeout_s):
            await event.wait()
    except TimeoutError:
        return
