"""The reconciler's guarantees under races, with a store double whose cache lags etcd (the real store
and API server are covered by tests/kube): a decision is never applied to a state it did not see, a
paused replica acts on nothing, and a task that cannot be read is not taken for a deleted one."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from unittest import mock

from mcp_tasks.operator.reconciler import Reconciler
from mcp_tasks.operator.settings import OperatorSettings
from mcp_tasks.operator.workqueue import WorkQueue
from mcp_tasks.protocol.models import TaskStatus
from mcp_tasks.tasks import transitions
from mcp_tasks.tasks.errors import TaskNotFound, VersionConflict
from mcp_tasks.tasks.ids import mint_task_id
from mcp_tasks.tasks.interfaces import Writer
from mcp_tasks.tasks.owner import Owner
from mcp_tasks.tasks.record import TaskRecord
from tests.unit.manifests import tool_spec

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
TOOL = tool_spec({"image": "example.org/t:1", "command": ["run"]}, maxRunTimeSeconds=3600, maxInputWaitSeconds=60)


class LaggingStore:
    """`cache` is what this replica has seen, `truth` what etcd holds; a 409 refreshes the cache."""

    namespace = "ns"

    def __init__(self, record: TaskRecord) -> None:
        self.truth = self.cache = record
        self.readable = True

    async def get(self, task_id: str, owner: Any = None, *, fresh: bool = False, summary: bool = False) -> TaskRecord:
        if not self.readable:
            raise TaskNotFound(task_id)
        if fresh:
            self.cache = self.truth
        return self.cache

    async def raw(self, task_id: str) -> dict[str, Any] | None:
        return {"metadata": {"name": task_id, "uid": "u"}}

    async def compare_and_swap(self, record: TaskRecord, writer: Writer) -> TaskRecord:
        assert writer is Writer.EXECUTOR
        if record.version != self.truth.version:
            self.cache = self.truth
            raise VersionConflict("409")
        self.truth = self.cache = dataclasses.replace(record, version=str(int(record.version) + 1))
        return self.truth

    def deleted(self, task_id: str) -> bool:
        return False

    def unfinished_ids(self) -> list[str]:
        return [self.truth.task_id]


class Tools:
    def get_tool(self, name: str) -> Any:
        return TOOL


class Artifacts:
    def __init__(self) -> None:
        self.deleted: list[str] = []

    async def delete_task(self, task_id: str) -> None:
        self.deleted.append(task_id)


def reconciler(store: LaggingStore, now: datetime, artifacts: Artifacts | None = None) -> tuple[Reconciler, list[str]]:
    deleted_jobs: list[str] = []
    r = Reconciler(mock.MagicMock(), store, Tools(), artifacts or Artifacts(), OperatorSettings(), lambda: now)  # type: ignore[arg-type]

    async def delete_job(task_id: str) -> bool:
        deleted_jobs.append(task_id)
        return True

    r._delete_job = delete_job  # type: ignore[method-assign]  # no API server here
    return r, deleted_jobs


def job(task_id: str) -> dict[str, Any]:
    labels = {"mcptasks.io/task-id": task_id}
    return {
        "metadata": {
            "name": "j",
            "uid": "j1",
            "resourceVersion": "5",
            "creationTimestamp": "2026-12-01T12:00:00Z",
            "labels": labels,
        }
    }


class ObservedQueue(WorkQueue):
    """A `WorkQueue` that tells how many workers wait in `get`, and which keys were done and at once added again."""

    def __init__(self) -> None:
        super().__init__()
        self.getting = 0
        self.put_back: list[str] = []
        self._just_done: str | None = None
        self._changed = asyncio.Event()

    async def get(self) -> str:
        self._note(1)
        try:
            return await super().get()
        finally:
            self.getting -= 1

    def done(self, key: str) -> None:
        self._just_done = key
        super().done(key)

    def add(self, key: str) -> None:
        if key == self._just_done:
            self.put_back.append(key)
        self._just_done = None
        super().add(key)
        self._note(0)

    def _note(self, getting: int) -> None:
        self.getting += getting
        self._changed.set()

    async def until(self, predicate: Callable[[], bool]) -> None:
        async with asyncio.timeout(5):
            while not predicate():
                self._changed.clear()
                await self._changed.wait()


def waiting_task() -> TaskRecord:
    base = transitions.new_task(mint_task_id(), Owner("t", "a", "static"), TOOL, {}, T0)
    request = {"method": "elicitation/create", "params": {}}
    return dataclasses.replace(
        base,
        attempt=1,
        status=TaskStatus.INPUT_REQUIRED,
        input_required_since=T0 + timedelta(seconds=1),
        input_requests={"k": request},
        issued_input_keys=("k",),
        version="1",
    )


async def test_a_decision_made_on_a_lagging_copy_is_not_applied_to_the_newer_task() -> None:
    """The cache says the wait timed out; etcd says the client answered in time. The write conflicts and
    the task is decided again from what it is now: still working, its Job kept."""
    waiting = waiting_task()
    answered = transitions.answer_input_requests(waiting, {"k": {"action": "accept"}}, T0 + timedelta(seconds=60))
    store = LaggingStore(waiting)
    store.truth = dataclasses.replace(answered, version="2")
    r, deleted_jobs = reconciler(store, T0 + timedelta(seconds=61.5))
    r.children.replace(waiting.task_id, job(waiting.task_id), [])
    await r.reconcile(waiting.task_id)
    assert store.truth.status is TaskStatus.WORKING and deleted_jobs == []
    await r.reconcile(waiting.task_id)  # the conflict queued it again: now decided on the fresh copy
    assert store.truth.status is TaskStatus.WORKING and deleted_jobs == []


async def test_a_replica_that_lost_the_lead_while_waiting_acts_on_nothing() -> None:
    """A worker idle inside `queue.get()` when this replica stopped leading does not reconcile the key it
    then gets: it puts it back for when the replica leads again."""
    waiting = waiting_task()
    store = LaggingStore(waiting)
    r, deleted_jobs = reconciler(store, T0 + timedelta(seconds=3600))  # long past the input wait
    r.children.replace(waiting.task_id, job(waiting.task_id), [])
    queue = ObservedQueue()
    r.queue = queue
    active = asyncio.Event()
    active.set()
    workers = asyncio.create_task(r.run_workers(active), name="workers")
    await queue.until(lambda: queue.getting == r.settings.reconcile_workers)  # every worker waits inside get()
    active.clear()
    queue.add(waiting.task_id)
    # each worker in turn takes the key and puts it back, then waits for the lead
    await queue.until(lambda: queue.getting == 0 and queue.put_back == [waiting.task_id] * r.settings.reconcile_workers)
    workers.cancel()
    await asyncio.gather(workers, return_exceptions=True)
    assert store.truth.status is TaskStatus.INPUT_REQUIRED and deleted_jobs == []
    assert len(r.queue) == 1, "the key waits for the next leadership"


async def test_a_task_that_cannot_be_read_is_not_taken_for_a_deleted_one() -> None:
    """A malformed McpTask (say a newer gateway's field) reads as not found, but the API server still has
    it: its artifacts stay."""
    store = LaggingStore(waiting_task())
    store.readable = False
    artifacts = Artifacts()
    r, _ = reconciler(store, T0, artifacts)
    await r.reconcile(store.truth.task_id)
    assert artifacts.deleted == []
