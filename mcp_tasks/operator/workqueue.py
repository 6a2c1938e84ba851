"""`WorkQueue`: which tasks to reconcile next, each at most once at a time. The shape of client-go's.

Events only *name* a task; the queue holds names, not events, so a burst of events about one task is
one reconcile of its current state:

- `add(key)` queues `key` unless it is already queued; a key added while it is being processed is
  queued again once that processing ends (`done`), so no change is missed and no key is ever processed
  by two workers at once.
- `add_after(key, delay_s)` queues it after `delay_s` seconds; the earliest pending time wins. Deadlines
  (start, run time, input wait, TTL keep-alive) are such delayed adds of one task.
- `retry(key)` queues it after a per-key exponential back-off (`base_delay_s` doubling up to
  `max_delay_s`), for a reconcile that raised; `forget(key)` resets the back-off after a success.

Keys are plain strings (task ids). The queue lives in one event loop and is not thread-safe. Delays are
measured on an injected monotonic clock (`time.monotonic` by default); a `get` already waiting for a due
time sleeps on the event loop for the interval it computed, so a test that drives a fake clock advances it
before calling `get`.
"""

from __future__ import annotations

import asyncio
import collections
import heapq
import time
from typing import Final

from mcp_tasks.tasks.interfaces import Monotonic

BASE_DELAY_S: Final = 0.05
MAX_DELAY_S: Final = 60.0


class ShutDown(Exception):
    """`get` was called on, or woken by, a queue that is shutting down."""


class WorkQueue:
    """A de-duplicating, delaying, rate-limited queue of keys (see the module docstring).

    Args:
        base_delay_s: first back-off of `retry`, in seconds; it doubles per consecutive failure.
        max_delay_s: longest back-off of `retry`, in seconds.
        monotonic: the clock delays are measured on, in seconds.
    """

    def __init__(
        self,
        base_delay_s: float = BASE_DELAY_S,
        max_delay_s: float = MAX_DELAY_S,
        monotonic: Monotonic = time.monotonic,
    ) -> None:
        self._monotonic = monotonic
        self._ready: collections.deque[str] = collections.deque()
        self._queued: set[str] = set()
        self._processing: set[str] = set()
        self._dirty: set[str] = set()
        self._delayed: list[tuple[float, str]] = []  # heap of (due, key); stale entries are skipped
        self._due: dict[str, float] = {}
        self._failures: dict[str, int] = {}
        self._base_delay_s = base_delay_s
        self._max_delay_s = max_delay_s
        self._wakeup = asyncio.Event()
        self._shutting_down = False

    def __len__(self) -> int:
        """Keys ready to be processed now (not counting delayed ones or those being processed)."""
        return len(self._ready)

    @property
    def delayed(self) -> int:
        """Keys waiting for a delayed add."""
        return len(self._due)

    def add(self, key: str) -> None:
        """Queue `key` now (a no-op when it is already queued; after `done` when it is being processed)."""
        if self._shutting_down:
            return
        if key in self._processing:
            self._dirty.add(key)
            return
        if key in self._queued:
            return
        self._queued.add(key)
        self._ready.append(key)
        self._wakeup.set()

    def add_after(self, key: str, delay_s: float) -> None:
        """Queue `key` in `delay_s` seconds (at once when ≤ 0); an earlier pending time for it is kept."""
        if delay_s <= 0:
            self.add(key)
            return
        due = self._monotonic() + delay_s
        if self._due.get(key, float("inf")) <= due:
            return
        self._due[key] = due
        heapq.heappush(self._delayed, (due, key))
        self._wakeup.set()

    def retry(self, key: str) -> float:
        """Queue `key` again after its back-off (which then doubles); return the delay in seconds."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        delay: float = min(self._max_delay_s, self._base_delay_s * 2.0**failures)
        self.add_after(key, delay)
        return delay

    def forget(self, key: str) -> None:
        """Reset `key`'s back-off (its last reconcile succeeded)."""
        self._failures.pop(key, None)

    async def get(self) -> str:
        """The next key to process; it stays "processing" until `done(key)`.

        Raises:
            ShutDown: the queue is shutting down.
        """
        while True:
            if self._shutting_down:
                raise ShutDown
            self._promote_due()
            if self._ready:
                key = self._ready.popleft()
                self._queued.discard(key)
                self._processing.add(key)
                return key
            self._wakeup.clear()
            timeout = None if not self._delayed else max(0.0, self._delayed[0][0] - self._monotonic())
            try:
                async with asyncio.timeout(timeout):
                    await self._wakeup.wait()
            except TimeoutError:
                pass

    def done(self, key: str) -> None:
        """`key`'s processing ended; a key added meanwhile is queued again now."""
        self._processing.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)

    def shut_down(self) -> None:
        """Wake every `get` with `ShutDown`; later adds are ignored."""
        self._shutting_down = True
        self._wakeup.set()

    def _promote_due(self) -> None:
        now = self._monotonic()
        while self._delayed and self._delayed[0][0] <= now:
            due, key = heapq.heappop(self._delayed)
            if self._due.get(key) != due:
                continue  # superseded by an earlier add_after, or already promoted
            del self._due[key]
            self.add(key)
