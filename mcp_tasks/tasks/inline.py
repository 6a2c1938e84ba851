"""`TaskBackedExecutor`: synchronous `tools/call` for deployments whose executor only runs tasks.

On Kubernetes the operator runs McpTasks and nothing else, so a call that is answered synchronously
(no tasks extension, or `taskPolicy: never`) is run as a task the client never sees: created with the
caller as owner, awaited for the tool's `syncTimeoutSeconds`, its result returned as the call's
result. A run that asks for input stays parked for the caller's next input round (`InputNeeded`,
`gateway.input_rounds`). The task then expires with its `ttlMs` like any other. The embedded runner
runs such calls directly instead, and makes a hidden task only when one asks for input
(`runner.LocalRunner.run_inline`). `await_call` is the wait both deployments' input rounds share.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from datetime import datetime, timedelta
from typing import Final

from mcp_tasks.protocol import inputs
from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.protocol.models import TaskStatus
from mcp_tasks.tasks import transitions
from mcp_tasks.tasks.errors import TaskNotFound
from mcp_tasks.tasks.ids import mint_task_id
from mcp_tasks.tasks.interfaces import (
    Clock,
    InlineCall,
    InputNeeded,
    ProgressSink,
    TaskStore,
    Writer,
    transact,
)
from mcp_tasks.tasks.record import TaskRecord
from mcp_tasks.tasks.results import error_result

logger = logging.getLogger("mcp_tasks.tasks")

INLINE_TTL_MS = 60_000
"""Retention of a synchronous call's hidden task after it finishes, in ms (nobody reads it afterwards)."""


WATCH_S: Final = 30.0
"""Default of `caller_watch_s`: a hidden task's `watched_until` lies this far ahead of its last renewal."""


def hidden(record: TaskRecord, watch_s: float = WATCH_S) -> TaskRecord:
    """`record` as a task its client never sees: kept `INLINE_TTL_MS` after it finishes (not its tool's
    TTL), and watched by its caller `watch_s` seconds at a time (`watched_until`, renewed by
    `keep_watching`), so an executor cancels it once the caller is gone.
    """
    retention_ms = min(record.ttl_ms, INLINE_TTL_MS)
    until = record.created_at + timedelta(seconds=watch_s)
    return dataclasses.replace(record, ttl_ms=retention_ms, retention_ms=retention_ms, watched_until=until)


async def keep_watching(store: TaskStore, record: TaskRecord, now: datetime, watch_s: float = WATCH_S) -> TaskRecord:
    """Renew `record.watched_until` once half of `watch_s` (seconds) has passed; return the record as it is."""
    if record.watched_until is None or record.watched_until - now > timedelta(seconds=watch_s / 2):
        return record
    until = now + timedelta(seconds=watch_s)
    try:
        renewed, _ = await transact(store, record.task_id, lambda r: (transitions.watch(r, until), None), Writer.CLIENT)
    except TaskNotFound:
        return record
    return renewed


async def await_call(
    store: TaskStore,
    task_id: str,
    timeout_s: float,
    clock: Clock,
    watch_s: float = WATCH_S,
    on_progress: ProgressSink | None = None,
) -> JsonObject:
    """Wait up to `timeout_s` seconds for a hidden task's `CallToolResult`, renewing `watched_until` meanwhile.

    Each new numeric progress report of the tool is passed to `on_progress`.

    Raises:
        InputNeeded: the run is parked in `input_required` with pending `inputRequests` (`task_id` set).
        TimeoutError: neither happened in time (the task is left running; the caller decides).
        TaskNotFound: the task is gone.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    reported: JsonObject | None = None
    while True:
        record = await store.get(task_id)
        if on_progress is not None and record.progress is not None and record.progress != reported:
            reported = record.progress
            await on_progress(_progress_report(record))
        outcome = call_outcome(record)
        if outcome is not None:
            return outcome
        if record.status is TaskStatus.INPUT_REQUIRED and record.input_requests:
            raise InputNeeded(record.tool, task_id)
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise TimeoutError(record.tool)
        await keep_watching(store, record, clock(), watch_s)
        await store.wait_for_change(min(remaining, 1.0), task_id)


def _progress_report(record: TaskRecord) -> JsonObject:
    report = dict(record.progress or {})
    if record.status_message:
        report["message"] = record.status_message
    return report


async def cancel_hidden(store: TaskStore, task_id: str, why: str, clock: Clock) -> None:
    """Ask the executor to stop a hidden task (cooperative cancel); a task already gone is fine."""
    logger.info("cancelling hidden task %s: %s", task_id, why)
    try:
        await transact(
            store, task_id, lambda r: (transitions.request_cancel(r, "gateway", clock()), None), Writer.CLIENT
        )
    except TaskNotFound:
        return


class TaskBackedExecutor:
    """A `ToolExecutor` that runs each synchronous call as a hidden task in `store`.

    Args:
        store: the task store the deployment's executor watches.
        clock: UTC clock.
        watch_s: how far ahead each hidden task is watched, in seconds (`GatewaySettings.caller_watch_s`).
    """

    def __init__(self, store: TaskStore, clock: Clock, watch_s: float = WATCH_S) -> None:
        self.store = store
        self.clock = clock
        self.watch_s = watch_s

    async def run_inline(self, call: InlineCall) -> JsonObject:
        """Create a task, wait up to `syncTimeoutSeconds` for it to finish, return its `CallToolResult`.

        Raises:
            InputNeeded: the tool asked for input mid-run; the task stays parked for the caller's next
                round, or is cancelled when `call.client_capabilities` is `None` (no rounds possible).
            TimeoutError: it did not finish in time (the task is cancelled).
        """
        tool = call.tool
        fresh = transitions.new_task(
            mint_task_id(),
            call.owner,
            tool,
            call.arguments,
            self.clock(),
            call.pre_input_responses,
            call.client_capabilities,
        )
        record = await self.store.create(hidden(fresh, self.watch_s))
        timeout_s = tool.execution.sync_timeout_seconds
        deadline = asyncio.get_running_loop().time() + timeout_s
        offered = dict(call.input_responses)
        try:
            while True:
                remaining = deadline - asyncio.get_running_loop().time()
                try:
                    return await await_call(
                        self.store, record.task_id, max(remaining, 0.0), self.clock, self.watch_s, call.on_progress
                    )
                except InputNeeded:
                    if call.client_capabilities is None:
                        why = "asked for input in a call without rounds"
                        await cancel_hidden(self.store, record.task_id, why, self.clock)
                        raise InputNeeded(tool.name) from None
                    if not offered or not await answer_offered(self.store, record.task_id, offered, self.clock):
                        raise
                    offered = {}  # used once: what the tool asks next goes to the caller
        except TimeoutError:
            why = f"exceeded the synchronous wait of {timeout_s:g}s"
            await cancel_hidden(self.store, record.task_id, why, self.clock)
            raise
        except asyncio.CancelledError:  # the caller is gone (client disconnected, server stopping)
            try:
                await asyncio.shield(cancel_hidden(self.store, record.task_id, "its caller went away", self.clock))
            except Exception as exc:  # the store is down: the task then runs out its own deadline
                logger.warning("could not cancel hidden task %s: %s", record.task_id, exc)
            raise


def offered_answers(record: TaskRecord, offered: JsonObject) -> JsonObject:
    """The answers among `offered` that fit a pending input request of `record` (the rest are ignored)."""
    return {
        key: answer
        for key, answer in offered.items()
        if key in record.input_requests and inputs.response_problem(record.input_requests[key], answer) is None
    }


async def answer_offered(store: TaskStore, task_id: str, offered: JsonObject, clock: Clock) -> bool:
    """Answer a parked run's pending requests from responses offered up front; True when any fitted."""
    applied: list[bool] = []

    def change(record: TaskRecord) -> tuple[TaskRecord, None]:
        fitting = offered_answers(record, offered)
        applied[:] = [bool(fitting)]
        return (transitions.answer_input_requests(record, fitting, clock()) if fitting else record), None

    try:
        await transact(store, task_id, change, Writer.CLIENT)
    except TaskNotFound:
        return False
    return bool(applied and applied[0])


def call_outcome(record: TaskRecord) -> JsonObject | None:
    """The `CallToolResult` a synchronous caller gets once the hidden task is terminal, else `None`.

    Completed: the tool's result (without `resultType`); failed or cancelled: an `isError` result.
    """
    if record.status is TaskStatus.COMPLETED and record.result is not None:
        return {key: value for key, value in record.result.items() if key != "resultType"}
    if record.status is TaskStatus.FAILED:
        return error_result(str((record.error or {}).get("message", "the tool failed")))
    if record.status is TaskStatus.CANCELLED:
        return error_result(record.status_message or "the call was cancelled")
    return None
