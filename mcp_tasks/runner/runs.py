"""How an execution runs: a process of its own (`ToolProcess`) or a call on a warm worker (`WarmRun`).

`WarmPools` keeps one `WarmWorkers` per warm tool (`spec.warm`), made by a factory the executor passes in:
local worker processes (`WarmPool`) in the embedded runner, the warm Deployment's pods (`EndpointPool`) in
the operator. `Runs.new_run` picks the kind of run for a tool. Called by supervision and synchronous runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import aiohttp

from mcp_tasks.observability import tracing
from mcp_tasks.runner.context import RunContext
from mcp_tasks.runner.process import ToolProcess, command_for
from mcp_tasks.runner.warm_pool import WarmPool, WarmUnavailable, WarmWorker, WarmWorkers
from mcp_tasks.runner.warm_runs import AdoptedWarmCall, WarmRun
from mcp_tasks.runtime import contract
from mcp_tasks.tasks.record import LeaseProcess
from mcp_tasks.tasks.tools import ToolSpec
from mcp_tasks.worker.executions import Execution
from mcp_tasks.worker.tls import PeerTls
from mcp_tasks.worker.warm import auth_for

ToolRun = ToolProcess | WarmRun | AdoptedWarmCall
"""A run the runner supervises: its own process, a call on a warm worker (`spec.warm`), or such a call a
crashed runner left running, re-attached."""


def cannot_start(tool: ToolSpec, exc: OSError) -> str:
    """Why a tool's run could not be started, naming the program and what to check."""
    if isinstance(exc, WarmUnavailable):
        return str(exc)
    program = command_for(tool)[0]
    hint = " (is it installed, and on PATH or given as a path relative to the manifest's folder?)"
    missing = isinstance(exc, FileNotFoundError)
    return f"cannot start tool {tool.name!r}: {program!r}: {exc.strerror or exc}" + (hint if missing else "")


class WarmPools:
    """The warm workers of each warm tool, made by `factory` on first use and started in the background.

    Args:
        factory: makes a tool's `WarmWorkers`.
        follow_declared: give an existing pool the tool as declared now at each use (the operator's
            McpTools change under it; embedded manifests do not).
    """

    def __init__(self, factory: Callable[[ToolSpec], WarmWorkers], follow_declared: bool = False) -> None:
        self.session: aiohttp.ClientSession | None = None
        """The HTTP session warm calls use (set by the executor once started)."""
        self.tls: PeerTls | None = None
        """How warm workers' HTTPS is verified (set by an executor whose workers serve TLS); `None`: plain HTTP."""
        self._factory = factory
        self._follow_declared = follow_declared
        self.started: dict[str, WarmWorkers] = {}
        self._starts: set[asyncio.Task[None]] = set()

    def get(self, tool: ToolSpec) -> WarmWorkers:
        """The warm workers of `tool`, started on first use."""
        pool = self.started.get(tool.name)
        if pool is None:
            pool = self.started[tool.name] = self._factory(tool)
            starting = asyncio.get_running_loop().create_task(pool.start(), name=f"warm-pool-{tool.name}")
            self._starts.add(starting)
            starting.add_done_callback(self._starts.discard)
        elif self._follow_declared:
            pool.tool = tool  # its limits and concurrency as declared now
        return pool

    async def aclose(self, grace_s: float) -> None:
        """Stop every pool's workers (`grace_s` for each call in flight). Pools stay, closed: a late call
        finds its pool closed rather than starting a new one.
        """
        await asyncio.gather(*(pool.aclose(grace_s) for pool in self.started.values()))


class Runs:
    """Makes the runs of one executor: a process with the worker contract's environment, or a warm call."""

    def __init__(self, ctx: RunContext, pools: WarmPools) -> None:
        self.ctx = ctx
        self.pools = pools

    def new_run(self, tool: ToolSpec, execution: Execution, acquire_timeout_s: float | None) -> ToolRun:
        """How `execution` runs: a call on one of the tool's warm workers, or a process of its own.

        Args:
            tool: the tool as declared now.
            execution: the worker API's view of the run (its id and token).
            acquire_timeout_s: how long a warm run waits for a free worker slot per `start()`, in seconds.
        """
        if tool.warm is not None:
            pool = self.pools.get(tool)
            detach_s = self.detach_s if self.ctx.adoptable and execution.task_id is not None else 0.0
            auth = auth_for(self.ctx.signer, tool.name, execution)
            return WarmRun(pool, execution, self.ctx.channel, self.ctx.base_url, auth, acquire_timeout_s, detach_s)
        return ToolProcess(tool, self.contract_env(execution), self.log_path(execution.execution_id))

    def next_worker(self, tool: ToolSpec) -> WarmWorker | None:
        """The local warm worker of `tool` the next call would most likely go to (`WarmPool.next_worker`);
        `None` for a tool that is not warm, for pods (`EndpointPool`), or when no worker is ready.
        """
        if tool.warm is None:
            return None
        pool = self.pools.get(tool)
        return pool.next_worker() if isinstance(pool, WarmPool) else None

    @property
    def detach_s(self) -> float:
        """How long a task's warm call outlives a crash of this runner, in seconds: two leases (the restarted
        runner claims the task once the crashed one's lease expires) plus a margin for the restart itself.
        """
        return 2 * self.ctx.settings.lease_duration_s + 30.0

    def adopt(self, tool: ToolSpec, running: LeaseProcess, execution: Execution) -> ToolRun:
        """The run a crashed runner left behind, as recorded in its lease: its process, or its warm call.

        Raises:
            ValueError: called before the executor opened its HTTP session.
        """
        log_path = self.log_path(execution.execution_id)
        if running.warm_endpoint is None:
            return ToolProcess.adopt(tool, running.pid, running.identity, log_path)
        session = self.pools.session
        if session is None:
            raise ValueError("no HTTP session for warm calls: start() first")
        pid = running.pid or None  # 0: a pod, not a local process
        auth = auth_for(self.ctx.signer, tool.name, execution)
        return AdoptedWarmCall(
            session,
            tool,
            execution,
            self.ctx.channel,
            auth,
            running.warm_endpoint,
            pid,
            running.identity,
            self.pools.tls,
        )

    def log_path(self, execution_id: str) -> Path:
        """Where the run's stderr goes."""
        return self.ctx.runs_dir / f"{execution_id}.stderr"

    def contract_env(self, execution: Execution) -> dict[str, str]:
        """The tool process's worker-contract environment (docs/tool-runtime.md): URL, token, task id."""
        env = {
            contract.ENV_WORKER_URL: f"{self.ctx.base_url}/{execution.execution_id}",
            contract.ENV_WORKER_TOKEN: execution.token,
            contract.ENV_TASK_ID: execution.task_id or "",
        }
        if execution.traceparent is not None:
            env[tracing.ENV_TRACEPARENT] = execution.traceparent  # the tool's own spans join the trace
        return env
