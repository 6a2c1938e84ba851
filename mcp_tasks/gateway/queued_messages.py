"""`QueuedMessages`: the `statusMessage` of a queued task, reused for reads sooner than its `pollIntervalMs`.

A task waiting for a slot says where it stands (`queued: 3 of your tenant's tasks ahead`), counted in the
store on read (`task_methods.get_task`). A client polling faster than the task's `pollIntervalMs` asks again
before anything it could act on has changed; counting again each time cost a store read per poll (with 32
clients polling every 10 ms, about seven per task, 0.4 ms of CPU per task: `bench.versus_fastmcp`). Such a
read gets the message of at most `pollIntervalMs` ago; a client polling at the pace it was given always
gets a fresh count.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Final

from mcp_tasks.tasks.interfaces import Monotonic

MESSAGES_KEPT: Final = 10_000
"""Queued tasks whose last message is kept at most (the least recently counted go first)."""


class QueuedMessages:
    """Each queued task's last computed `statusMessage` and when it was computed (bounded: `kept` tasks).

    Read only after the task's owner was checked (the key is a task id the caller was allowed to read).

    Args:
        monotonic: the clock, in seconds.
        kept: how many tasks' messages are kept at most.
    """

    def __init__(self, monotonic: Monotonic = time.monotonic, kept: int = MESSAGES_KEPT) -> None:
        self._monotonic = monotonic
        self._kept = kept
        self._messages: OrderedDict[str, tuple[float, str]] = OrderedDict()

    def recent(self, task_id: str, poll_interval_ms: int | None) -> str | None:
        """The message kept for `task_id` if it was computed less than `poll_interval_ms` ago, else `None`."""
        kept = self._messages.get(task_id)
        if kept is None or not poll_interval_ms:
            return None
        computed_at, message = kept
        return message if (self._monotonic() - computed_at) * 1000 < poll_interval_ms else None

    def keep(self, task_id: str, message: str) -> None:
        """Remember `message` as `task_id`'s, computed now."""
        self._messages.pop(task_id, None)
        self._messages[task_id] = (self._monotonic(), message)
        if len(self._messages) > self._kept:
            self._messages.popitem(last=False)
