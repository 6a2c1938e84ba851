"""Token buckets of task creation and the pace of polls (`gateway.rate_limits`), on an injected clock: our own
policy (docs/fair-share.md), answered as HTTP 429 with `Retry-After` by the gateway."""

from __future__ import annotations

import pytest

from mcp_tasks.gateway.rate_limits import Bucket, PollPace, TokenBuckets, retry_after_ms


class Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def principal(name: str, rate: float = 2.0, burst: int = 3) -> Bucket:
    return Bucket(("principal", name), rate, burst, "task_create_rate_per_principal")


def tenant(name: str, rate: float = 10.0, burst: int = 4) -> Bucket:
    return Bucket(("tenant", name), rate, burst, "task_create_rate_per_tenant")


def test_a_burst_then_the_rate_then_the_wait_until_the_next_token() -> None:
    clock = Clock()
    buckets = TokenBuckets(100, clock)
    assert [buckets.take([principal("a")]) for _ in range(3)] == [None, None, None]
    refused = buckets.take([principal("a")])
    assert refused is not None and refused[0].limit == "task_create_rate_per_principal"
    assert refused[1] == pytest.approx(0.5)  # one token every 1/2 s
    clock.now_s += 0.5
    assert buckets.take([principal("a")]) is None
    assert buckets.take([principal("b")]) is None  # another principal has its own bucket


def test_both_buckets_or_neither_and_the_longest_wait_is_named() -> None:
    clock = Clock()
    buckets = TokenBuckets(100, clock)
    for name in ("a", "a", "a", "b"):
        assert buckets.take([principal(name), tenant("t")]) is None
    refused = buckets.take([principal("a"), tenant("t")])  # both empty: the principal's wait (0.5 s) is longer
    assert refused is not None and refused[0].limit == "task_create_rate_per_principal"
    refused = buckets.take([principal("c"), tenant("t")])  # c's own bucket is full: the tenant's refuses
    assert refused is not None and refused[0].limit == "task_create_rate_per_tenant"
    clock.now_s += 0.1
    assert buckets.take([principal("c"), tenant("t")]) is None
    assert buckets.take([principal("c"), tenant("t")]) is not None  # the refusal took no token from c


def test_no_rate_means_no_limit_and_no_memory() -> None:
    buckets = TokenBuckets(100, Clock())
    assert all(buckets.take([principal("a", rate=0.0)]) is None for _ in range(1000))
    assert len(buckets) == 0


def test_memory_is_bounded_full_buckets_are_forgotten_first() -> None:
    clock = Clock()
    buckets = TokenBuckets(3, clock)
    for name in ("a", "b", "c", "d"):
        buckets.take([principal(name, rate=1.0, burst=2)])
        clock.now_s += 0.1
    assert len(buckets) == 3  # past max_keys: "a", the closest to full, was dropped
    clock.now_s += 1.0  # every bucket is full again: none is kept
    buckets.take([])
    assert len(buckets) == 0


def test_retry_after_is_rounded_up_to_a_whole_millisecond() -> None:
    assert retry_after_ms(0.0001) == 1
    assert retry_after_ms(1.2341) == 1235


def test_a_poll_sooner_than_poll_interval_is_counted_as_too_soon() -> None:
    clock = Clock()
    pace = PollPace(clock, kept=2)
    assert not pace.too_soon("t1", 1000)  # the first read is never too soon
    clock.now_s += 0.5
    assert pace.too_soon("t1", 1000)
    clock.now_s += 1.0
    assert not pace.too_soon("t1", 1000)
    assert not pace.too_soon("t2", None)
    pace.too_soon("t3", 1000)  # kept=2: t1 is forgotten
    assert not pace.too_soon("t1", 1000)
