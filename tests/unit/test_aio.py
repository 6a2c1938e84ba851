"""The async toolkit (`mcp_tasks.aio`): first of several waits, a periodic loop that survives, a bounded stop.

All our own choices (CONVENTIONS.md §Async): never swallow `CancelledError`, never leave a task behind.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from mcp_tasks import aio

WAIT_S = 5.0
"""Bound of every wait in these tests, in seconds."""


async def test_first_of_returns_with_the_first_wait_and_cancels_the_others() -> None:
    first, never = asyncio.Event(), asyncio.Event()
    other = asyncio.ensure_future(never.wait())
    first.set()
    async with asyncio.timeout(WAIT_S):
        await aio.first_of(first.wait(), other)
    assert other.cancelled()


async def test_first_of_cancelled_from_outside_reaps_every_wait() -> None:
    never, started = asyncio.Event(), asyncio.Event()

    async def wait_forever() -> None:
        started.set()
        await never.wait()

    waits = [asyncio.ensure_future(never.wait()) for _ in range(2)]
    waiting = asyncio.create_task(aio.first_of(wait_forever(), *waits))
    async with asyncio.timeout(WAIT_S):
        await started.wait()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(WAIT_S):
            await waiting
    assert all(wait.cancelled() for wait in waits)


async def test_every_logs_a_failing_step_and_runs_again(caplog: pytest.LogCaptureFixture) -> None:
    runs: list[int] = []
    third = asyncio.Event()

    async def step() -> None:
        runs.append(len(runs))
        if len(runs) == 3:
            third.set()
        if len(runs) == 1:
            raise RuntimeError("the API server is away")

    loop = asyncio.create_task(aio.every(0, step, "test loop"), name="every-under-test")
    try:
        async with asyncio.timeout(WAIT_S):
            await third.wait()
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
    assert loop.cancelled()
    failures = [record for record in caplog.records if record.levelno == logging.ERROR]
    assert [record.getMessage() for record in failures] == ["test loop failed; retrying"]
    assert failures[0].exc_info is not None


async def test_every_is_ended_by_a_cancellation_raised_inside_its_step() -> None:
    started = asyncio.Event()

    async def step() -> None:
        started.set()
        await asyncio.Event().wait()

    loop = asyncio.create_task(aio.every(0, step, "test loop"))
    async with asyncio.timeout(WAIT_S):
        await started.wait()
    loop.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(WAIT_S):
            await loop


async def test_every_asks_a_callable_interval_before_each_pause() -> None:
    asked: list[int] = []
    enough = asyncio.Event()

    def interval_s() -> float:
        asked.append(1)
        if len(asked) == 2:
            enough.set()
        return 0.0

    async def step() -> None:
        return None

    loop = asyncio.create_task(aio.every(interval_s, step, "test loop"))
    try:
        async with asyncio.timeout(WAIT_S):
            await enough.wait()
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)


async def test_cancel_and_wait_ends_every_task_and_reports_a_failed_one(caplog: pytest.LogCaptureFixture) -> None:
    async def fail() -> None:
        raise RuntimeError("boom")

    failed = asyncio.create_task(fail(), name="failing")
    waiting = asyncio.create_task(asyncio.Event().wait(), name="waiting")
    async with asyncio.timeout(WAIT_S):
        await asyncio.wait([failed])
        await aio.cancel_and_wait([failed, waiting], timeout_s=WAIT_S)
    assert waiting.cancelled()
    assert [record.getMessage() for record in caplog.records] == ["task failing had failed"]
