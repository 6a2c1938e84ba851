"""`LocalRunner`: the embedded executor, composed of its parts. Claims tasks with leases, runs each as a
local process or a call on a warm worker, serves the worker API on loopback, sweeps expired tasks.

The parts, one concept each: `claims` (the claim loop and restart rules), `supervision` (one run: start,
lease renewal, the shared stop rule of `tasks.deadlines`, the outcome), `adoption` (runs that outlived a
crashed runner), `synchronous` (plain `tools/call` runs and their promotion to hidden tasks), `runs` (a
process or a warm call; warm pools), `context` (what they share). Cancellation is cooperative:
`tasks/cancel` only records the request; the supervisor sees it, stops the tool (SIGTERM, grace,
SIGKILL) and records `cancelled` unless the tool finished first. docs/design.md §7 states the restart rules.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import shutil
import socket
import tempfile
from datetime import datetime
from pathlib import Path

import aiohttp
from aiohttp import web

from mcp_tasks import aio
from mcp_tasks.observability import metrics
from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.runner import outcomes
from mcp_tasks.runner.adoption import Adoption
from mcp_tasks.runner.claims import Claimer
from mcp_tasks.runner.context import RunContext
from mcp_tasks.runner.outcomes import KeptOutcomes
from mcp_tasks.runner.runs import Runs, WarmPools
from mcp_tasks.runner.settings import RunnerSettings
from mcp_tasks.runner.supervision import Supervisor
from mcp_tasks.runner.synchronous import SynchronousRuns
from mcp_tasks.runner.tokens import WorkerTokens
from mcp_tasks.runner.warm_pool import WarmPool, WarmWorkers
from mcp_tasks.tasks.errors import StoreUnavailable
from mcp_tasks.tasks.interfaces import ArtifactStore, Clock, FairQueue, InlineCall, TaskStore, ToolCatalog
from mcp_tasks.tasks.limits import LimitSettings
from mcp_tasks.tasks.tools import ToolSpec
from mcp_tasks.worker import warm_auth
from mcp_tasks.worker.api import create_worker_app
from mcp_tasks.worker.channel import WorkerChannel
from mcp_tasks.worker.executions import Execution, ExecutionTable
from mcp_tasks.worker.warm_auth import WarmCallSigner

__all__ = ["LocalRunner", "RunnerSettings"]

logger = logging.getLogger("mcp_tasks.runner")


def _read_port(path: Path | None) -> int:
    """The worker port a previous runner recorded, or 0 (any free port)."""
    try:
        text = path.read_text().strip() if path is not None else ""
    except OSError:
        return 0
    return int(text) if text.isdigit() and 0 < int(text) < 65536 else 0


def new_holder() -> str:
    """A lease holder name: `host:pid:random`, so `identity.holder_is_alive` can check a local holder."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class LocalRunner:
    """The embedded executor; also the gateway's `ToolExecutor` for synchronous calls.

    Use `await start()` and `await aclose()`. A restarted server adopts the runs of a crashed one
    (docs/design.md §7) when it gets the same `state_dir` (worker port, stderr files) and the same
    persisted `worker_key` (the tools' tokens are derived from it); without them runs are not adoptable.
    Warm calls carry credentials minted by `warm_call_signer` (its public key goes to the warm workers it
    starts); a restarted runner re-attaches to a crashed one's warm calls only with the same key.
    `limits` are the running budgets and weights its claims and synchronous runs share slots by
    (`tasks.fair_share`; default: none, equal weights).
    """

    def __init__(
        self,
        store: TaskStore,
        catalog: ToolCatalog,
        artifacts: ArtifactStore,
        clock: Clock,
        settings: RunnerSettings,
        state_dir: Path | None = None,
        worker_key: bytes | None = None,
        warm_call_signer: WarmCallSigner | None = None,
        limits: LimitSettings | None = None,
    ) -> None:
        # Where runs survive this process: the worker port (tools keep calling it) and each run's stderr
        # file; with the persisted worker key (tokens a restarted runner can verify) runs are adoptable.
        # Without a state folder a temporary folder holds the stderr files and the key lives in memory.
        runs_dir = (state_dir / "runs") if state_dir is not None else Path(tempfile.mkdtemp(prefix="mcptasks-"))
        key = worker_key if worker_key is not None else secrets.token_bytes(32)
        if warm_call_signer is None:
            warm_call_signer = WarmCallSigner.from_pem(warm_auth.new_private_pem())
        self.ctx = RunContext(
            store,
            catalog,
            artifacts,
            clock,
            settings,
            new_holder(),
            WorkerTokens(key),
            warm_call_signer,
            runs_dir,
            adoptable=state_dir is not None,
            outcomes=KeptOutcomes(state_dir / "outcomes") if state_dir is not None else None,
            limits=limits or LimitSettings(),
        )
        self.pools = WarmPools(self._new_pool)
        self.runs = Runs(self.ctx, self.pools)
        self.supervisor = Supervisor(self.ctx, self.runs)
        self.adoption = Adoption(self.ctx, self.supervisor)
        self.claimer = Claimer(self.ctx, self.supervisor, self.adoption)
        self.synchronous = SynchronousRuns(self.ctx, self.runs, self.supervisor)
        self.ctx.channel = WorkerChannel(
            store, artifacts, clock, settings.inline_result_max_bytes, promote=self.synchronous.promote
        )
        self._state_dir = state_dir
        self._loops: list[asyncio.Task[None]] = []
        self._web_runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None  # calls to warm workers

    @property
    def holder(self) -> str:
        """The lease holder name of this runner."""
        return self.ctx.holder

    @property
    def executions(self) -> ExecutionTable:
        """The runs the worker API can find now."""
        return self.ctx.executions

    def _new_pool(self, tool: ToolSpec) -> WarmWorkers:
        """Local worker processes of `tool`."""
        assert self._session is not None, "start() first"
        return WarmPool(tool, self._session, self.ctx.runs_dir, self.ctx.signer.public_pem)

    async def start(self) -> None:
        """Serve the worker API on loopback, then start the claim and sweep loops.

        With a state folder the port is the one the previous runner used, when it is free, so the tools
        that outlived it reach this runner and can be adopted; otherwise any free port.
        """
        ctx = self.ctx
        app = create_worker_app(self, ctx.channel, ctx.settings.artifact_max_bytes + 64 * 1024)
        # A tool's long-poll must not hold up shutdown: cancel handlers whose tool is gone, wait ≤1 s.
        self._web_runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0, handler_cancellation=True)
        await self._web_runner.setup()
        port_file = None if self._state_dir is None else self._state_dir / "worker-port"
        previous = _read_port(port_file)
        try:
            await web.TCPSite(self._web_runner, "127.0.0.1", previous).start()
            taken = False
        except OSError:
            # Another server on this data folder (or another program) has it. Keep the record: the tools
            # of whoever holds it keep calling it, and that server's restart must find it again.
            logger.warning(
                "worker port %s is taken (another server on this data folder?); runs started here "
                "use another port and cannot be adopted after a crash",
                previous,
            )
            await web.TCPSite(self._web_runner, "127.0.0.1", 0).start()
            taken = True
        port = self._web_runner.addresses[0][1]
        ctx.port = port
        if port_file is not None and not taken:
            port_file.write_text(str(port))
        ctx.base_url = f"http://127.0.0.1:{port}/v1/executions"
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, force_close=False),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=5),
        )
        self.pools.session = self._session
        for tool in ctx.catalog.list_tools():
            if tool.warm is not None:
                self.pools.get(tool)  # minWorkers of each warm tool start now
        self._loops = [
            asyncio.create_task(self.claimer.loop(), name="runner-claim"),
            asyncio.create_task(
                aio.every(ctx.settings.sweep_interval_s, self._sweep, "expiry sweep", log=logger), name="runner-sweep"
            ),
        ]
        logger.info("runner %s started; worker API on 127.0.0.1:%s", ctx.holder, port)

    async def aclose(self) -> None:
        """Stop claiming, stop running tools (their tasks follow the restart rules), stop the worker API."""
        ctx = self.ctx
        for loop in self._loops:
            loop.cancel()
        for loop in self._loops:
            with contextlib.suppress(asyncio.CancelledError):
                await loop
        await ctx.stop_supervisors()
        await self.pools.aclose(ctx.settings.shutdown_grace_s)
        if self._session is not None:
            await self._session.close()
        if self._web_runner is not None:
            await self._web_runner.cleanup()
        if self._state_dir is None:
            await asyncio.to_thread(shutil.rmtree, ctx.runs_dir, True)  # the temporary stderr folder

    async def resolve(self, execution_id: str, token: str) -> Execution | None:
        """`ExecutionLookup` for the worker API (`adoption.Adoption.resolve`).

        Raises:
            ExecutionPending: the run is being set up or taken over; the tool should retry (503).
        """
        return await self.adoption.resolve(execution_id, token)

    async def run_inline(self, call: InlineCall) -> JsonObject:
        """Run a tool synchronously (no task) and return its `CallToolResult` (`ToolExecutor`).

        Raises:
            InputNeeded: the tool asked for input mid-run (its run continues as a hidden task).
            TimeoutError: it did not finish within `syncTimeoutSeconds`.
        """
        return await self.synchronous.run_inline(call)

    async def _sweep(self) -> None:
        try:
            await self.sweep_expired(self.ctx.clock())
            if self.ctx.outcomes is not None:
                await outcomes.discard_settled(self.ctx.outcomes, self.ctx.store)
            metrics.swept(await self.ctx.store.unfinished(), self.ctx.clock())
            if isinstance(self.ctx.store, FairQueue):
                metrics.tenants_counted(await self.ctx.store.tenant_counts(), self.ctx.limits.metrics_tenants)
        except StoreUnavailable as exc:
            logger.warning("expiry sweep skipped: task store unavailable (%s)", exc)

    async def sweep_expired(self, now: datetime) -> int:
        """Delete finished tasks past their expiry (`TaskRecord.expires_at`), and their artifacts; return how many."""
        deleted = 0
        while ids := await self.ctx.store.delete_expired(now, 500):
            for task_id in ids:
                await self.ctx.artifacts.delete_task(task_id)
            deleted += len(ids)
        if deleted:
            logger.info("deleted %d expired tasks", deleted)
        return deleted
