"""`FakeClock`: wall and monotonic time that a test moves by hand instead of sleeping (CONVENTIONS.md §Tests)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

START = datetime(2026, 1, 1, tzinfo=UTC)


class FakeClock:
    """Both readings of time (`mcp_tasks.tasks.interfaces.Clock` and `Monotonic`), moved only by `advance`.

    Pass the object itself where a wall `Clock` is wanted (`clock()` is now, UTC) and `clock.monotonic`
    where a `Monotonic` is. The two readings move together.
    """

    def __init__(self, start: datetime = START, monotonic_start: float = 1000.0) -> None:
        self.now = start
        self._monotonic = monotonic_start

    def __call__(self) -> datetime:
        return self.now

    def monotonic(self) -> float:
        return self._monotonic

    def advance(self, seconds: float) -> None:
        """Move both readings `seconds` forward."""
        assert seconds >= 0, "time does not run backwards"
        self.now += timedelta(seconds=seconds)
        self._monotonic += seconds
