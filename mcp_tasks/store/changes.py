"""`ChangeFeed`: in-process wake-ups for waiters on task changes, shared by both task stores.

Backs `TaskStore.wait_for_change` and `wait_for_new_tasks`: a writer (or a watch event) calls
`changed(task_ids)` / `created(records)`; waiters on one task are woken only by changes to that task,
waiters on "any task" by every change. Spurious wake-ups are allowed (callers re-read), lost ones are not:
each event is replaced when it fires, so a waiter always waits on an event that has not fired yet.

A store that knows the records it made runnable (created, or reset for a re-run) passes them to
`created`; an executor in the same process takes them (`take_created`) and claims them without first
querying for runnable tasks. That is a
shortcut only: the records are those the store committed, a claim is still a compare-and-swap on
their version, and a lost or overflowing hand-over (`None`) sends the executor back to its query.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Final

from mcp_tasks.tasks.record import TaskRecord

MAX_CREATED: Final = 1024
"""Most created records kept for `take_created`; past it the hand-over is dropped (the executor queries)."""


class ChangeFeed:
    """Per-task and any-task change events, a new-task event, and the records created since last taken."""

    def __init__(self) -> None:
        self._any = asyncio.Event()
        self._per_task: dict[str, asyncio.Event] = {}
        self._created = asyncio.Event()
        self._new: list[TaskRecord] | None = []  # None: overflowed (or a creation without its record)

    def changed(self, task_ids: Iterable[str]) -> None:
        """Wake waiters on any task and on each of `task_ids` (waiters on other tasks stay asleep)."""
        self._any.set()
        self._any = asyncio.Event()
        for task_id in task_ids:
            event = self._per_task.pop(task_id, None)
            if event is not None:
                event.set()

    def created(self, records: Iterable[TaskRecord] | None = None) -> None:
        """Wake waiters for new tasks; keep `records` (the new tasks as committed) for `take_created`.

        `None` (a creation seen without its record, e.g. a watch event) drops the hand-over until the next take.
        """
        if records is None:
            self._new = None
        elif self._new is not None:
            self._new.extend(records)
            if len(self._new) > MAX_CREATED:
                self._new = None
        self._created.set()
        self._created = asyncio.Event()

    def take_created(self) -> list[TaskRecord] | None:
        """The records created since the last take, oldest first; `None` if some were not kept (query instead)."""
        taken, self._new = self._new, []
        return taken

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
