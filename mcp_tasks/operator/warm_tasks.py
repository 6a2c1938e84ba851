"""`WarmTaskRunner`: the operator runs warm tools' tasks on their warm pods, each under a lease.

A task of a warm tool (`spec.warm`) gets no Job (`decide` leaves a Job-less warm task alone). This runner
is the embedded `LocalRunner`'s claim and supervision, on the McpTask store, with the warm Deployment's
ready pods (`status.warm.endpoints`) as its workers (`EndpointPool`):

- it claims the task (compare-and-swap of `status.lease`, attempt + 1), sends the call to a pod with the
  worker API to ask input through (`workerUrl`: the operator's worker API, the same one Job pods use) and a
  per-execution token derived from a key every operator replica shares, and renews the lease while the
  call runs;
- `maxRunTimeSeconds`, `maxInputWaitSeconds`, `tasks/cancel` and a hidden task's caller going away stop the
  call (`DELETE /v1/calls/{id}`; the pod itself is deleted when the call outlives its grace period);
- a pod lost mid-call, or an operator replica that died holding the lease (it expires), applies the restart
  rules: the task runs again when its tool is idempotent, else it is `failed` with "outcome unknown".

The worker API of any replica serves the pods' calls (`resolve`), from the McpTask, since every write is
compare-and-swap. Synchronous calls never come here: the gateways send them to the pods directly.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import hmac
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Final

import aiohttp

from mcp_tasks.runner import LocalRunner, RunnerSettings
from mcp_tasks.runner.runner import ToolRun
from mcp_tasks.runner.warm_pool import EndpointPool, WarmWorkers
from mcp_tasks.store.kubernetes.catalog import KubernetesToolCatalog
from mcp_tasks.store.kubernetes.store import KubernetesTaskStore
from mcp_tasks.tasks.errors import TaskNotFound
from mcp_tasks.tasks.interfaces import ArtifactStore, Clock
from mcp_tasks.tasks.record import Lease, TaskRecord
from mcp_tasks.tasks.tools import ToolSpec
from mcp_tasks.worker.executions import Execution

logger = logging.getLogger("mcp_tasks.operator")

RERUN: Final = "warm-rerun"
"""Holder of the expired lease a lost warm run leaves on a task it re-runs: any warm runner claims it."""


def worker_key(shared_secret: bytes) -> bytes:
    """The key warm calls' worker tokens are derived from: the same in every operator replica (they share
    the data volume's secret), so any replica's worker API can verify a pod's call.
    """
    return hmac.new(shared_secret, b"mcp-tasks warm worker tokens", hashlib.sha256).digest()


class WarmTaskRunner(LocalRunner):
    """Runs the tasks of warm tools on their pods (see the module docstring).

    Args:
        store, catalog, artifacts, clock, settings: as for `LocalRunner` (the McpTask store and catalog).
        worker_url: base URL at which pods reach the operator's worker API (`OperatorSettings.pod_worker_url`).
        key: from `worker_key`.
        job_exists: whether a task (by id) has a Job (it is then the Job's, not this runner's), read
            authoritatively.
        kill_pod: stops the warm pod at an address (`http://ip:port`).
    """

    def __init__(
        self,
        store: KubernetesTaskStore,
        catalog: KubernetesToolCatalog,
        artifacts: ArtifactStore,
        clock: Clock,
        settings: RunnerSettings,
        worker_url: str,
        key: bytes,
        job_exists: Callable[[str], Awaitable[bool]],
        kill_pod: Callable[[str], Awaitable[None]],
    ) -> None:
        super().__init__(store, catalog, artifacts, clock, settings, state_dir=None, worker_key=key)
        self.kube_store = store
        self.kube_catalog = catalog
        self.worker_url = worker_url.rstrip("/")
        self._job_exists = job_exists
        self._kill_pod = kill_pod

    async def start(self) -> None:
        """Start claiming (no worker API of its own: the operator's serves its calls; no expiry: the
        operator's).
        """
        self._base_url = f"{self.worker_url}/v1/executions"
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=5),
        )
        self._loops = [asyncio.create_task(self._claim_loop(), name="warm-tasks-claim")]
        logger.info("warm task runner %s started; pods call back on %s", self.holder, self._base_url)

    def _pool(self, tool: ToolSpec) -> WarmWorkers:
        pool = super()._pool(tool)
        pool.tool = tool  # the McpTool may have changed since: its limits and concurrency as declared now
        return pool

    def _new_pool(self, tool: ToolSpec) -> WarmWorkers:
        assert self._session is not None, "start() first"
        name = tool.name
        return EndpointPool(tool, self._session, lambda: self.kube_catalog.warm_endpoints(name), self._kill_pod)

    async def _runnable(self, capacity: int) -> list[TaskRecord]:
        """Tasks of warm tools this runner may claim, oldest first: never run (`attempt` 0, no lease), or
        with a lease that expired (a warm run whose holder is gone, or a re-run this runner asked for). A task
        that ran without a lease ran as a Job (its tool became warm since): it stays the Job's.
        """
        warm = frozenset(tool.name for tool in self.kube_catalog.list_tools() if tool.warm is not None)
        listed = await self.kube_store.list_runnable(self.clock(), capacity * 4, tools=warm)
        return [record for record in listed if record.lease is not None or record.attempt == 0][:capacity]

    async def _claim(self, record: TaskRecord) -> TaskRecord | None:
        """`LocalRunner._claim`, after making sure no Job runs the task (an authoritative read: the
        operator's copies of Jobs may lag, or be empty in a standby replica).
        """
        if record.lease is None and await self._job_exists(record.task_id):
            return None
        if record.lease is not None and record.lease.holder == RERUN:
            record = dataclasses.replace(record, lease=None)  # asked for by a lost warm run: claim it afresh
        return await super()._claim(record)

    def _after_lost_worker(self, record: TaskRecord, tool: ToolSpec, process: ToolRun, now: datetime) -> TaskRecord:
        """As `LocalRunner`'s; a re-run keeps an expired `RERUN` lease, so it stays this runner's (a
        task that ran with no lease is a Job's).
        """
        updated = super()._after_lost_worker(record, tool, process, now)
        if updated.lease is None and not updated.status.is_terminal:
            updated = dataclasses.replace(updated, lease=Lease(holder=RERUN, expires_at=now))
        return updated

    async def resolve(self, execution_id: str, token: str) -> Execution | None:
        """A warm call's execution: one this replica runs, or, for a pod whose token verifies, built from the
        McpTask (its calls may reach any replica; every channel write is compare-and-swap).
        """
        found = self.executions.find(execution_id, token)
        if found is not None:
            return found
        task_id, _, attempt = execution_id.rpartition(".")
        if not task_id or not attempt.isdigit():
            return None
        if not hmac.compare_digest(token.encode(), self._token_for(execution_id).encode()):
            return None
        try:
            record = await self.store.get(task_id)
        except TaskNotFound:
            return None
        if record.status.is_terminal or record.attempt != int(attempt) or record.lease is None:
            return None
        return self._task_execution(record, execution_id)
