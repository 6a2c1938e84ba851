"""Rate limits of one gateway replica: token buckets on task creation, and the pace of `tasks/get` polls.

`tool_calls` takes a token from the caller's principal's bucket and its tenant's before a task is stored
(`TokenBuckets.take`); over either, the call is refused with HTTP 429, `Retry-After` and `data.retryAfterMs`
(`tasks.errors.LimitReached`). `task_methods.get_task` tells `PollPace` of each read; a read sooner than
the task's `pollIntervalMs` after the previous one is served (polling is the baseline) and counted in
`mcptasks_fast_polls_total`.

Both are in memory and per replica: N gateway replicas allow N times the rate (docs/fair-share.md). Memory
is bounded: a bucket is dropped once it would be full again (a full bucket and no bucket are the same), in
that order (a heap by the time each becomes full), and past `max_keys` the buckets closest to full go
first. Never reads the clock itself: it is injected (`Monotonic`).
"""

from __future__ import annotations

import heapq
import math
import time
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Final

from mcp_tasks.tasks.interfaces import Monotonic

_EPSILON: Final = 1e-9
"""Tokens short of one that still count as one (float refill arithmetic)."""
POLLS_KEPT: Final = 10_000
"""Most tasks whose last `tasks/get` time `PollPace` remembers (least recently read forgotten first)."""


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at_s: float
    full_at_s: float


@dataclass(frozen=True, slots=True)
class Bucket:
    """One bucket a request must take a token from.

    Attributes:
        key: whose bucket (a principal, a tenant); keys of different kinds must not collide.
        rate_per_s: tokens added per second; 0: no limit (the bucket is not consulted).
        burst: the bucket's size (>= 1).
        limit: the setting's name, for the refusal (`task_create_rate_per_principal`, ...).
    """

    key: Hashable
    rate_per_s: float
    burst: int
    limit: str


class TokenBuckets:
    """Token buckets by key, bounded to `max_keys` buckets (see the module docstring).

    Args:
        max_keys: most buckets kept.
        monotonic: the clock, in seconds.
    """

    def __init__(self, max_keys: int, monotonic: Monotonic = time.monotonic) -> None:
        self.max_keys = max_keys
        self._monotonic = monotonic
        self._buckets: dict[Hashable, _Bucket] = {}
        self._full: list[tuple[float, int, Hashable]] = []  # (full_at_s, tie, key); stale entries skipped
        self._tie = 0

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, buckets: Sequence[Bucket]) -> tuple[Bucket, float] | None:
        """Take one token from each of `buckets` (those with a rate), all or none.

        Returns:
            `None` when taken; else the bucket that refuses and the seconds until it has a token (the
            longest wait among the empty ones).
        """
        now = self._monotonic()
        self._expire(now)
        limited = [bucket for bucket in buckets if bucket.rate_per_s > 0]
        refused: tuple[Bucket, float] | None = None
        states: list[tuple[Bucket, _Bucket]] = []
        for bucket in limited:
            state = self._buckets.get(bucket.key)
            tokens = (
                float(bucket.burst)
                if state is None
                else min(bucket.burst, state.tokens + (now - state.at_s) * bucket.rate_per_s)
            )
            if tokens < 1.0 - _EPSILON:
                wait_s = (1.0 - tokens) / bucket.rate_per_s
                if refused is None or wait_s > refused[1]:
                    refused = (bucket, wait_s)
            states.append((bucket, _Bucket(tokens, now, now)))
        if refused is not None:
            return refused
        for bucket, state in states:
            state.tokens = max(0.0, state.tokens - 1.0)
            state.full_at_s = now + (bucket.burst - state.tokens) / bucket.rate_per_s
            self._buckets[bucket.key] = state
            self._tie += 1
            heapq.heappush(self._full, (state.full_at_s, self._tie, bucket.key))
        self._bound()
        return None

    def _expire(self, now: float) -> None:
        """Drop the buckets that are full again by `now`."""
        while self._full and self._full[0][0] <= now:
            full_at, _, key = heapq.heappop(self._full)
            state = self._buckets.get(key)
            if state is not None and state.full_at_s == full_at:
                del self._buckets[key]

    def _bound(self) -> None:
        """Keep at most `max_keys` buckets (the closest to full go first) and the heap's stale entries few."""
        while len(self._buckets) > self.max_keys and self._full:
            full_at, _, key = heapq.heappop(self._full)
            state = self._buckets.get(key)
            if state is not None and state.full_at_s == full_at:
                del self._buckets[key]
        if len(self._full) > 2 * len(self._buckets) + 64:
            self._full = [(state.full_at_s, tie, key) for tie, (key, state) in enumerate(self._buckets.items())]
            self._tie = len(self._full)
            heapq.heapify(self._full)


def retry_after_ms(wait_s: float) -> int:
    """`wait_s` as whole milliseconds, rounded up (a retry at that time finds the token)."""
    return max(1, math.ceil(wait_s * 1000))


class PollPace:
    """When each task was last read, to count reads sooner than its `pollIntervalMs` (bounded: `POLLS_KEPT`).

    Args:
        monotonic: the clock, in seconds.
    """

    def __init__(self, monotonic: Monotonic = time.monotonic, kept: int = POLLS_KEPT) -> None:
        self._monotonic = monotonic
        self._kept = kept
        self._last: OrderedDict[str, float] = OrderedDict()

    def too_soon(self, task_id: str, poll_interval_ms: int | None) -> bool:
        """Record a read of `task_id` now; whether it came sooner than `poll_interval_ms` after the last one."""
        now = self._monotonic()
        last = self._last.pop(task_id, None)
        self._last[task_id] = now
        if len(self._last) > self._kept:
            self._last.popitem(last=False)
        return last is not None and bool(poll_interval_ms) and (now - last) * 1000 < (poll_interval_ms or 0)
