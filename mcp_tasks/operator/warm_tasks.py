"""`WarmTaskRunner`: the operator runs warm tools' tasks on their warm pods, each under a lease.

A task of a warm tool (`spec.warm`) gets no Job (`decide` leaves a Job-less warm task alone). This runner
composes the embedded executor's parts (`runner.claims`, `runner.supervision`) over the McpTask store, with
the warm Deployment's ready pods (`status.warm.endpoints`) as its workers (`EndpointPool`):

- it claims the task (compare-and-swap of `status.lease`, attempt + 1), sends the call to a pod with the
  worker API to ask input through (`workerUrl`: the operator's worker API, the same one Job pods use) and a
  per-execution token derived from the operator's warm-call key (every replica holds it), and renews the
  lease while the call runs; each call, and its cancel, carries a credential minted with that key
  (`worker.warm_auth`), which the pods check with its public half;
- `maxRunTimeSeconds`, `maxInputWaitSeconds`, `tasks/cancel` and a hidden task's caller going away stop the
  call (`DELETE /v1/calls/{id}`; the pod itself is deleted when the call outlives its grace period);
- a pod lost mid-call, or an operator replica that died holding the lease (it expires), applies the restart
  rule of every executor (`transitions.after_lost_run`): the task runs again when its tool is idempotent,
  within `MAX_RUNS` runs in all, else it is `failed` with "outcome unknown".

The worker API of any replica serves the pods' calls (`resolve`), from the McpTask, since every write is
compare-and-swap. Synchronous calls never come here: the gateways send them to the pods directly.

With a cap or running budgets set (`operator.admission`), a task that never ran is claimed only once the
leader's admission admitted it (the same fair share as Jobs, in the same count); the tasks offered to the
claim loop are the admitted ones, so a tenant's long backlog of warm tasks never hides another's.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import sys
import tempfile
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Final

import aiohttp

from mcp_tasks.operator.admission import Admission
from mcp_tasks.runner.adoption import Adoption
from mcp_tasks.runner.claims import Claimer
from mcp_tasks.runner.context import RunContext
from mcp_tasks.runner.runner import new_holder
from mcp_tasks.runner.runs import Runs, ToolRun, WarmPools
from mcp_tasks.runner.settings import RunnerSettings
from mcp_tasks.runner.supervision import Supervisor, lost_worker_rule
from mcp_tasks.runner.tokens import WorkerTokens
from mcp_tasks.runner.warm_pool import EndpointPool, WarmWorkers
from mcp_tasks.store.kubernetes.catalog import KubernetesToolCatalog
from mcp_tasks.store.kubernetes.store import KubernetesTaskStore
from mcp_tasks.tasks.errors import TaskNotFound
from mcp_tasks.tasks.fair_share import QUEUED_PREFIX
from mcp_tasks.tasks.interfaces import ArtifactStore, Clock
from mcp_tasks.tasks.record import Lease, TaskRecord
from mcp_tasks.tasks.tools import ToolSpec
from mcp_tasks.worker.channel import WorkerChannel
from mcp_tasks.worker.executions import Execution
from mcp_tasks.worker.tls import PeerTls
from mcp_tasks.worker.warm_auth import WarmCallSigner

logger = logging.getLogger("mcp_tasks.operator")

RERUN: Final = "warm-rerun"
"""Holder of the expired lease a lost warm run leaves on a task it re-runs: any warm runner claims it."""


def _keep_rerun_here(record: TaskRecord, tool: ToolSpec, process: ToolRun, now: datetime) -> TaskRecord:
    """The restart rule of every executor; a re-run keeps an expired `RERUN` lease, so it stays this
    runner's (a task that ran with no lease is a Job's).
    """
    updated = lost_worker_rule(record, tool, process, now)
    if updated.lease is None and not updated.status.is_terminal:
        updated = dataclasses.replace(updated, lease=Lease(holder=RERUN, expires_at=now))
    return updated


class WarmTaskRunner:
    """Runs the tasks of warm tools on their pods (see the module docstring).

    Args:
        store, catalog: the McpTask store and the McpTool catalog.
        artifacts, clock, settings: as for `LocalRunner`.
        worker_url: base URL at which pods reach the operator's worker API (`OperatorSettings.pod_worker_url`).
        signer: the operator's warm-call key: mints the pods' call credentials, and the worker tokens are
            derived from it (`WarmCallSigner.worker_tokens_key`), so any replica's worker API verifies them.
        job_exists: whether a task (by id) has a Job (it is then the Job's, not this runner's), read
            authoritatively.
        kill_pod: stops the warm pod at an address (`http://ip:port`).
        tls: how the warm pods' HTTPS is verified (the chart's `tls.warmWorkers`); `None`: plain HTTP.
        admission: the operator's admission (`None`: every task may start at once).
    """

    def __init__(
        self,
        store: KubernetesTaskStore,
        catalog: KubernetesToolCatalog,
        artifacts: ArtifactStore,
        clock: Clock,
        settings: RunnerSettings,
        worker_url: str,
        signer: WarmCallSigner,
        job_exists: Callable[[str], Awaitable[bool]],
        kill_pod: Callable[[str], Awaitable[None]],
        tls: PeerTls | None = None,
        admission: Admission | None = None,
    ) -> None:
        self.store = store
        self.admission = admission
        self.tls = tls
        self.catalog = catalog
        self.worker_url = worker_url.rstrip("/")
        self._job_exists = job_exists
        self._kill_pod = kill_pod
        runs_dir = Path(tempfile.mkdtemp(prefix="mcptasks-warm-"))  # warm calls write no stderr file here
        tokens = WorkerTokens(signer.worker_tokens_key())
        self.ctx = RunContext(
            store, catalog, artifacts, clock, settings, new_holder(), tokens, signer, runs_dir, adoptable=True
        )
        self.ctx.channel = WorkerChannel(store, artifacts, clock, settings.inline_result_max_bytes)
        self.pools = WarmPools(self._new_pool, follow_declared=True)
        supervisor = Supervisor(self.ctx, Runs(self.ctx, self.pools), after_lost_worker=_keep_rerun_here)
        self.claimer = Claimer(self.ctx, supervisor, Adoption(self.ctx, supervisor), self._runnable, self._admit)
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.Task[None] | None = None

    @property
    def holder(self) -> str:
        """The lease holder name of this runner."""
        return self.ctx.holder

    async def start(self) -> None:
        """Start claiming (no worker API of its own: the operator's serves its calls; no expiry: the
        operator's).
        """
        self.ctx.base_url = f"{self.worker_url}/v1/executions"
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=5),
        )
        self.pools.session = self._session
        self.pools.tls = self.tls
        self._loop = asyncio.create_task(self.claimer.loop(), name="warm-tasks-claim")
        logger.info("warm task runner %s started; pods call back on %s", self.holder, self.ctx.base_url)

    async def aclose(self) -> None:
        """Stop claiming, stop the calls in flight (their tasks follow the restart rules)."""
        ctx = self.ctx
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop
        await ctx.stop_supervisors()
        await self.pools.aclose(ctx.settings.shutdown_grace_s)
        if self._session is not None:
            await self._session.close()
        await asyncio.to_thread(ctx.runs_dir.rmdir)

    def wake(self) -> None:
        """Claim now rather than at the next poll (a task was admitted)."""
        self.ctx.capacity_freed.set()

    def _new_pool(self, tool: ToolSpec) -> WarmWorkers:
        assert self._session is not None, "start() first"
        name = tool.name
        return EndpointPool(tool, self._session, lambda: self.catalog.warm_endpoints(name), self._kill_pod, self.tls)

    async def _runnable(self, capacity: int) -> list[TaskRecord]:
        """Tasks of warm tools this runner may claim, oldest first: never run (`attempt` 0, no lease), or
        with a lease that expired (a warm run whose holder is gone, or a re-run this runner asked for). A task
        that ran without a lease ran as a Job (its tool became warm since): it stays the Job's.
        """
        warm = frozenset(tool.name for tool in self.catalog.list_tools() if tool.warm is not None)
        if self.admission is None or not self.admission.enabled:
            listed = await self.store.list_runnable(self.ctx.clock(), capacity * 4, tools=warm)
            return [record for record in listed if record.lease is not None or record.attempt == 0][:capacity]
        listed = await self.store.list_runnable(self.ctx.clock(), sys.maxsize, tools=warm)  # the cache: no reads
        return [record for record in listed if self._admitted(record)][:capacity]

    def _admitted(self, record: TaskRecord) -> bool:
        """A task this runner may claim: a warm run's re-run, or one the admission admitted."""
        if record.lease is None and record.attempt > 0:
            return False  # it ran as a Job
        admission = self.admission
        return admission is None or admission.verdict(record, self.catalog.get_tool(record.tool)) is None

    async def _admit(self, record: TaskRecord) -> TaskRecord | None:
        """Leave a task a Job runs (an authoritative read: the operator's copies of Jobs may lag, or be empty
        in a standby replica); a re-run a lost warm run asked for is claimed afresh.
        """
        if not self._admitted(record):
            return None
        if record.lease is None and await self._job_exists(record.task_id):
            return None
        if record.status_message is not None and record.status_message.startswith(QUEUED_PREFIX):
            record = dataclasses.replace(record, status_message=None)  # admitted: it no longer waits
        if record.lease is not None and record.lease.holder == RERUN:
            return dataclasses.replace(record, lease=None)
        return record

    async def resolve(self, execution_id: str, token: str) -> Execution | None:
        """A warm call's execution: one this replica runs, or, for a pod whose token verifies, built from the
        McpTask (its calls may reach any replica; every channel write is compare-and-swap).
        """
        found = self.ctx.executions.find(execution_id, token)
        if found is not None:
            return found
        verified = self.ctx.tokens.verify(execution_id, token)
        if verified is None:
            return None
        task_id, attempt = verified
        try:
            record = await self.store.get(task_id)
        except TaskNotFound:
            return None
        if record.status.is_terminal or record.attempt != attempt or record.lease is None:
            return None
        return self.ctx.task_execution(record, execution_id)
