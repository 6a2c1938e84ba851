"""A small asyncio toolkit: the waits and loops every component writes the same way.

- `first_of(*waits)`: wait for whichever of several awaitables finishes first, and reap the rest.
- `every(interval_s, step, name)`: run `step` periodically for as long as the caller lets it; a
  failing step is logged and the loop goes on.
- `cancel_and_wait(tasks)`: the end of a component's own background tasks, bounded in time.

Called by the runner, the gateway's SSE streams and the operator. It imports nothing of `mcp_tasks`
(the lowest layer in `pyproject.toml`'s contracts), holds no state and never swallows
`asyncio.CancelledError`: cancelling the caller cancels and awaits whatever was started here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, NoReturn

logger = logging.getLogger("mcp_tasks.aio")


async def first_of(*waits: Awaitable[object]) -> None:
    """Wait until the first of `waits` finishes; cancel and reap the others, also when cancelled ourselves.

    A wait that raised counts as finished; its exception is not re-raised (the caller looks at what
    it waited for). Bound the whole with a wait of its own (e.g. `asyncio.sleep(timeout_s)`) when
    none of `waits` is bounded.

    Args:
        waits: coroutines, tasks or futures. A shielded future (`asyncio.shield`) is left running.
    """
    tasks = [asyncio.ensure_future(wait) for wait in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def every(
    interval_s: float | Callable[[], float],
    step: Callable[[], Awaitable[object]],
    name: str,
    *,
    log: logging.Logger = logger,
) -> NoReturn:
    """Run `step()` now and then again `interval_s` seconds after each run ends, until cancelled.

    An exception from `step` is logged with its traceback (as `name`) and the loop goes on: a
    transient failure (the API server restarting) must not end a background loop for the life of
    the process. Cancellation is never swallowed: it ends the loop, from inside `step` or the pause.

    Args:
        interval_s: pause between the end of one run and the start of the next, in seconds; a
            callable is asked before each pause (e.g. a faster poll while waiting to lead).
        step: one run of the loop's work.
        name: what the loop is called in log lines (`"operator sweep"`).
        log: the component's logger.

    Raises:
        asyncio.CancelledError: when cancelled (the only way out).
    """
    while True:
        try:
            await step()
        except Exception:  # a background loop must survive any failure of one run
            log.exception("%s failed; retrying", name)
        await asyncio.sleep(interval_s() if callable(interval_s) else interval_s)


async def cancel_and_wait(
    tasks: Iterable[asyncio.Task[Any]], timeout_s: float = 5.0, *, log: logging.Logger = logger
) -> None:
    """Cancel `tasks` and wait up to `timeout_s` seconds for them to end; log any that is still stuck, and
    any that had failed (its exception is otherwise lost).

    Args:
        tasks: the caller's own tasks (it started them; nobody else awaits them).
        timeout_s: how long to wait for them to end after cancelling, in seconds.
        log: the component's logger.
    """
    tasks = list(tasks)
    pending = [task for task in tasks if not task.done()]
    for task in pending:
        task.cancel()
    if pending:
        _, stuck = await asyncio.wait(pending, timeout=timeout_s)
        for task in stuck:
            log.error("task %s did not stop within %.1f s of being cancelled", task.get_name(), timeout_s)
    for task in tasks:
        if task.done() and not task.cancelled() and task.exception() is not None:
            log.error("task %s had failed", task.get_name(), exc_info=task.exception())
