"""`TaskBackedExecutor`: synchronous `tools/call` for deployments whose executor only runs tasks.

On Kubernetes the operator runs McpTasks and nothing else, so a call that is answered synchronously
(no tasks extension, or `taskPolicy: never`) is run as a task the client never sees: created with the
caller as owner, awaited for the tool's `syncTimeoutSeconds`, its result returned as the call's
result. The task then expires with its `ttlMs` like any other. The embedded runner runs such calls
directly instead (`runner.LocalRunner.run_inline`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from datetime import datetime, timedelta
from typing import Final

from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.protocol.models import TaskStatus
from mcp_tasks.tasks import transitions
from mcp_tasks.tasks.errors import TaskNotFound
from mcp_tasks.tasks.ids import mint_task_id
from mcp_tasks.tasks.interfaces import Clock, InputNeeded, TaskStore, notify_written, transact
from mcp_tasks.tasks.owner import Owner
from mcp_tasks.tasks.record import TaskRecord
from mcp_tasks.tasks.results import error_result
from mcp_tasks.tasks.tools import ToolSpec

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
        renewed, _ = await transact(store, record.task_id, lambda r: (transitions.watch(r, until), None))
    except TaskNotFound:
        return record
    return renewed


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

    async def run_inline(
        self, tool: ToolSpec, arguments: JsonObject, owner: Owner, pre_input_responses: JsonObject
    ) -> JsonObject:
        """Create a task, wait up to `syncTimeoutSeconds` for it to finish, return its `CallToolResult`.

        Raises:
            InputNeeded: the tool asked for input mid-run (the task is cancelled).
            TimeoutError: it did not finish in time (the task is cancelled).
        """
        fresh = transitions.new_task(mint_task_id(), owner, tool, arguments, self.clock(), pre_input_responses)
        record = await self.store.create(hidden(fresh, self.watch_s))
        notify_written(None, record)
        try:
            return await self._await(record, tool)
        except asyncio.CancelledError:  # the caller is gone (client disconnected, server stopping)
            try:
                await asyncio.shield(self._cancel(record, "its caller went away"))
            except Exception as exc:  # the store is down: the task then runs out its own deadline
                logger.warning("could not cancel hidden task %s: %s", record.task_id, exc)
            raise

    async def _await(self, record: TaskRecord, tool: ToolSpec) -> JsonObject:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + tool.execution.sync_timeout_seconds
        while True:
            record = await self.store.get(record.task_id)
            outcome = call_outcome(record)
            if outcome is not None:
                return outcome
            if record.status is TaskStatus.INPUT_REQUIRED:
                await self._cancel(record, "asked for input during a synchronous call")
                raise InputNeeded(tool.name)
            remaining = deadline - loop.time()
            if remaining <= 0:
                await self._cancel(record, f"exceeded the synchronous wait of {tool.execution.sync_timeout_seconds:g}s")
                raise TimeoutError(tool.name)
            await keep_watching(self.store, record, self.clock(), self.watch_s)
            await self.store.wait_for_change(min(remaining, 1.0), record.task_id)

    async def _cancel(self, record: TaskRecord, why: str) -> None:
        logger.info("cancelling hidden task %s: %s", record.task_id, why)
        try:
            await transact(
                self.store, record.task_id, lambda r: (transitions.request_cancel(r, "gateway", self.clock()), None)
            )
        except TaskNotFound:
            return


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
