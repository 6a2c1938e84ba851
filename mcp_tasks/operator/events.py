"""Kubernetes Events (events.k8s.io/v1) for McpTasks, reported by the operator, never in the way.

What is reported (`regarding` the McpTask, `related` its Job once a run started):

- `JobCreated` (Normal): the operator created the task's Job.
- `QuotaExceeded` (Warning): a ResourceQuota refused the task's Job; it waits and retries
  (`refusals`), the note quoting the quota. A refusal for good fails the task as `JobRefused`.
- `ToolRunning` (Normal): the tool process in the pod called the worker API for the first time.
- `InputRequested` (Normal): the task moved to `input_required`; the note names the keys.
- `Completed` (Normal) or `ToolError` (Warning, completed with `isError: true`); `Cancelled` (Normal).
- A failure (Warning), with the failure's `error.data.reason` as its reason (`StartTimeout`,
  `OutcomeUnknown`, `DeadlineExceeded`, `CannotStart`, ..., else `Failed`) and its message as the note;
  for `StartTimeout` the note names the pod's waiting reason (e.g. `ImagePullBackOff`).

`events_for(before, after)` decides, as a pure function of a task write. `EventRecorder.emit` only
puts the event on a bounded queue (a full queue drops it and counts `mcptasks_events_dropped_total`),
so the reconcile path never waits for the API server; one background task writes them. The same
(task, reason, note) again within `SERIES_WINDOW_S` updates the first Event's `series` (count,
lastObservedTime) instead of creating another, as the events API asks of repeated occurrences.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import secrets
import socket
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal, cast

from kubernetes_asyncio.client import ApiClient

from mcp_tasks.observability import metrics
from mcp_tasks.operator.jobs import object_name
from mcp_tasks.operator.tool_status import MERGE_PATCH
from mcp_tasks.protocol.models import TaskStatus
from mcp_tasks.store.kubernetes import client
from mcp_tasks.store.kubernetes.resources import GROUP, VERSION
from mcp_tasks.store.kubernetes.store import KubernetesTaskStore
from mcp_tasks.tasks.record import TaskRecord

logger = logging.getLogger("mcp_tasks.operator")

REPORTING_CONTROLLER: Final = "mcptasks.io/operator"
SERIES_WINDOW_S: Final = 30 * 60.0
"""A repeat of the same event within this many seconds joins the first one's series."""
QUEUE_SIZE: Final = 1000
NOTE_LIMIT: Final = 1024
"""Longest note the events API accepts, in characters (events.k8s.io/v1 `note`)."""


@dataclass(frozen=True, slots=True)
class TaskEvent:
    """One event about one McpTask: `reason` is CamelCase, `note` human-readable (≤ 1024 characters)."""

    task_id: str
    reason: str
    note: str
    type: Literal["Normal", "Warning"] = "Normal"
    action: str = "Reconcile"
    related_job: bool = True


def events_for(before: TaskRecord | None, after: TaskRecord) -> list[TaskEvent]:
    """The events a task write reports (see the module table); none for a creation or a quiet write."""
    if before is None or before.status is after.status:
        return []
    job = after.attempt >= 1  # a Job exists (or existed) only once a run started
    if after.status is TaskStatus.INPUT_REQUIRED:
        keys = ", ".join(sorted(after.input_requests))
        return [TaskEvent(after.task_id, "InputRequested", f"Waiting for input: {keys}", action="AskInput")]
    if not after.status.is_terminal:
        return []
    reason = after.finished_reason
    note = after.status_message or after.status.value
    if after.status is TaskStatus.COMPLETED:
        kind: Literal["Normal", "Warning"] = "Warning" if reason == "ToolError" else "Normal"
        return [TaskEvent(after.task_id, reason, note, kind, "Finish", job)]
    if after.status is TaskStatus.CANCELLED:
        return [TaskEvent(after.task_id, "Cancelled", note, "Normal", "Cancel", job)]
    return [TaskEvent(after.task_id, reason, note, "Warning", "Fail", job)]


def _micro_time(now: datetime) -> str:
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class EventRecorder:
    """Writes `TaskEvent`s as events.k8s.io/v1 Events in the background, deduplicated into series.

    Args:
        api: the operator's API client.
        namespace: where the McpTasks (and so their Events) live.
        store: to look up the McpTask's uid for `regarding` (from its cache).
    """

    def __init__(self, api: ApiClient, namespace: str, store: KubernetesTaskStore) -> None:
        self._events = client.Apis(api).events
        self._namespace = namespace
        self._store = store
        self._queue: asyncio.Queue[TaskEvent] = asyncio.Queue(QUEUE_SIZE)
        self._series: collections.OrderedDict[tuple[str, str, str], tuple[str, int, float]] = collections.OrderedDict()
        self._instance = socket.gethostname()
        self._writer: asyncio.Task[None] | None = None

    def observe(self, before: TaskRecord | None, after: TaskRecord) -> None:
        """A write observer of the task store (`TaskStore.observe`): emit the events of this write."""
        for event in events_for(before, after):
            self.emit(event)

    def emit(self, event: TaskEvent) -> None:
        """Queue `event` for writing; never blocks (drops it, counted, when the queue is full)."""
        try:
            self._queue.put_nowait(event)
        except asyncio.QueueFull:
            metrics.EVENTS_DROPPED.inc()

    def start(self) -> None:
        """Start the background writer (on the running loop)."""
        self._writer = asyncio.create_task(self._write_forever(), name="events")

    async def aclose(self) -> None:
        """Write what is queued (for up to 2 s), then stop."""
        if self._writer is None:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(2):
                await self._queue.join()
        self._writer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._writer

    async def _write_forever(self) -> None:
        while True:
            event = await self._queue.get()
            try:
                await self._write(event)
            except Exception as exc:  # an Event is best effort: never let one stop the others
                metrics.EVENTS_DROPPED.inc()
                logger.warning("task %s: could not write Event %s: %s", event.task_id, event.reason, exc)
            finally:
                self._queue.task_done()

    async def _write(self, event: TaskEvent) -> None:
        now = datetime.now(UTC)
        key = (event.task_id, event.reason, event.note)
        known = self._series.get(key)
        if known is not None and time.monotonic() - known[2] < SERIES_WINDOW_S:
            name, count, first = known
            patch = {"series": {"count": count + 1, "lastObservedTime": _micro_time(now)}}
            try:
                await client.call(self._events.patch_namespaced_event, name, self._namespace, patch, **MERGE_PATCH)
                self._series[key] = (name, count + 1, first)
                return
            except client.NotFound:
                pass  # the Event expired (the API server keeps them an hour): start a new one
        obj = await self._store.raw(event.task_id)
        if obj is None:
            return  # the task is gone: nothing to report about
        body = self._body(event, obj, now)
        await client.call(self._events.create_namespaced_event, self._namespace, cast(Any, body))
        self._series[key] = (body["metadata"]["name"], 1, time.monotonic())
        while len(self._series) > QUEUE_SIZE:
            self._series.popitem(last=False)

    def _body(self, event: TaskEvent, obj: dict[str, Any], now: datetime) -> dict[str, Any]:
        metadata = obj["metadata"]
        body: dict[str, Any] = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": f"{event.task_id}.{secrets.token_hex(8)}", "namespace": self._namespace},
            "eventTime": _micro_time(now),
            "reportingController": REPORTING_CONTROLLER,
            "reportingInstance": self._instance[:128],
            "action": event.action,
            "reason": event.reason,
            "note": event.note[:NOTE_LIMIT],
            "type": event.type,
            "regarding": {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "McpTask",
                "name": metadata["name"],
                "namespace": self._namespace,
                "uid": metadata["uid"],
            },
        }
        if event.related_job:
            body["related"] = {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": object_name(event.task_id),
                "namespace": self._namespace,
            }
        return body
