"""`QueuedMessages`: a queued task's message is reused only within its `pollIntervalMs`, and the memory is bounded."""

from __future__ import annotations

from mcp_tasks.gateway.queued_messages import QueuedMessages


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_message_is_reused_within_the_tasks_poll_interval_and_counted_again_after_it() -> None:
    clock = Clock()
    messages = QueuedMessages(clock)
    assert messages.recent("t1", 500) is None  # never counted
    messages.keep("t1", "queued: 3 of your tenant's tasks ahead")
    clock.now += 0.499
    assert messages.recent("t1", 500) == "queued: 3 of your tenant's tasks ahead"
    clock.now += 0.001
    assert messages.recent("t1", 500) is None  # a client polling at its pace gets a fresh count
    assert messages.recent("t2", 500) is None  # another task's message is never another's


def test_without_a_poll_interval_every_read_counts_again() -> None:
    messages = QueuedMessages(Clock())
    messages.keep("t1", "queued: next in line for a slot")
    assert messages.recent("t1", 0) is None and messages.recent("t1", None) is None


def test_the_least_recently_counted_task_goes_first_when_full() -> None:
    messages = QueuedMessages(Clock(), kept=2)
    messages.keep("a", "A")
    messages.keep("b", "B")
    messages.keep("a", "A2")  # counted again: now the most recent
    messages.keep("c", "C")
    assert messages.recent("b", 500) is None
    assert (messages.recent("a", 500), messages.recent("c", 500)) == ("A2", "C")
