"""Warm workers on one machine: a pool of long-lived tool processes per McpTool with `spec.warm`.

`WarmPool` keeps between `minWorkers` and `maxWorkers` processes of the tool's command, each serving
calls (`runtime.serve`) on its own loopback port, `concurrency` at a time. Workers start with the
server (`minWorkers` of them) or on demand, are health-checked, stopped after `idleTimeoutSeconds`
idle above the minimum, and replaced when they exit, with a back-off (0.5 s doubling to 30 s) while
they keep failing. `EndpointPool` offers the same slots on pods that run elsewhere (Kubernetes). One call on
a slot is a `warm_runs.WarmRun`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol

import aiohttp

from mcp_tasks.observability import metrics
from mcp_tasks.runner.process import ToolProcess
from mcp_tasks.runtime import contract
from mcp_tasks.tasks.tools import ToolSpec, WarmSpec
from mcp_tasks.worker.tls import PeerTls, base_url

logger = logging.getLogger("mcp_tasks.runner")

READY_TIMEOUT_S: Final = 30.0
"""How long a new worker may take to answer `/healthz`, in seconds, before it is stopped as failed."""
HEALTH_INTERVAL_S: Final = 10.0
"""How often every worker's `/healthz` is checked, in seconds; three failures in a row replace it."""
MAINTAIN_INTERVAL_S: Final = 1.0
"""How often the pool reaps idle workers and tops up to `minWorkers`, in seconds."""
BACKOFF_FIRST_S: Final = 0.5
BACKOFF_MAX_S: Final = 30.0
STABLE_S: Final = 10.0
"""A worker that exits by itself sooner than this after its start delays the next start (back-off)."""
REFUSED_BACKOFF_FIRST_S: Final = 0.1
REFUSED_BACKOFF_MAX_S: Final = 2.0
"""Waits between tries of a call a worker refused (429 busy, gone), in seconds: 0.1 doubling to 2."""
FAILED_STARTS_LIMIT: Final = 3
"""Starts in a row that never became ready after which a call that finds no worker gets an error instead
of waiting (a start is still tried after the back-off, so a fixed command recovers)."""


def _backoff(failures: int) -> float:
    """Seconds before the next start after `failures` in a row: 0.5 s doubling to 30 s."""
    return float(min(BACKOFF_FIRST_S * 2 ** (failures - 1), BACKOFF_MAX_S))


class WarmUnavailable(OSError):
    """No warm worker could take the call: the tool's workers fail to start, or none freed up in time."""


class WarmBusy(WarmUnavailable):
    """No slot freed up within the wait asked for (the workers run; try again, or give up)."""


class WorkerSlot(Protocol):
    """A warm worker a call was given a slot on."""

    @property
    def base_url(self) -> str:
        """`http://host:port` of the worker."""
        ...


class WarmWorkers(Protocol):
    """Where a tool's warm calls get a slot: the embedded `WarmPool`, or `EndpointPool` (Kubernetes pods)."""

    tool: ToolSpec
    session: aiohttp.ClientSession
    tls: PeerTls | None
    """How its workers' HTTPS is verified; `None`: they serve plain HTTP (embedded: loopback)."""

    async def start(self) -> None:
        """Start whatever keeps the workers (none for pods)."""
        ...

    async def acquire(self, timeout_s: float | None) -> WorkerSlot:
        """A worker with a free slot, counted as taken. Raises `WarmUnavailable`."""
        ...

    async def release(self, worker: WorkerSlot) -> None:
        """Free the slot `acquire` gave."""
        ...

    async def kill(self, worker: WorkerSlot) -> None:
        """Stop `worker` at once (a call on it ignored its cancel past the grace period)."""
        ...

    async def aclose(self, grace_s: float) -> None:
        """Stop the workers this pool started, if any."""
        ...


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(slots=True, eq=False)
class WarmWorker:
    """One worker process of a pool: its address, the calls it runs now, when it last finished one."""

    process: ToolProcess
    port: int
    started_at: float
    calls: int = 0
    ready: bool = False
    stopping: bool = False  # the pool stops it (idle, unhealthy, a stuck call, shutdown): not a crash
    last_used: float = 0.0
    health_failures: int = 0
    exited: asyncio.Task[int | None] | None = field(default=None, repr=False)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class WarmPool:
    """The warm workers of one tool.

    Args:
        tool: the tool (`tool.warm` set).
        session: the HTTP session calls and health checks use.
        runs_dir: where each worker's stderr file goes.
        call_key: the public key (PEM) the workers check their calls' credentials with
            (`contract.ENV_SERVE_CALL_KEY`, handed over in their environment; not a secret).
    """

    def __init__(self, tool: ToolSpec, session: aiohttp.ClientSession, runs_dir: Path, call_key: str) -> None:
        assert tool.warm is not None
        self.tool = tool
        self.call_key = call_key
        self.spec: WarmSpec = tool.warm
        self.session = session
        self.tls: PeerTls | None = None  # loopback workers serve plain HTTP
        self.runs_dir = runs_dir
        self.workers: list[WarmWorker] = []
        self._changed = asyncio.Condition()
        self._failed_starts = 0  # starts in a row that never became ready
        self._quick_exits = 0  # ready workers in a row that exited by themselves soon after starting
        self._next_start = 0.0
        self._last_failure = ""
        self._loop_task: asyncio.Task[None] | None = None
        self._closing = False
        self._serial = 0
        self._lives: set[asyncio.Task[None]] = set()  # one per worker: start, wait for exit, forget

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    async def start(self) -> None:
        """Start the maintenance loop, which brings the pool up to `minWorkers` at once (not once closed:
        a server stopped right after it started closes its pools before their start ran).
        """
        if self._closing:
            return
        self._loop_task = asyncio.create_task(self._maintain(), name=f"warm-pool-{self.tool.name}")

    async def aclose(self, grace_s: float) -> None:
        """Stop the loop and every worker (SIGTERM: a worker finishes its calls within `grace_s`, then SIGKILL)."""
        self._closing = True
        for worker in self.workers:
            worker.stopping = True
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
        lives = list(self._lives)
        for life in lives:  # a worker being spawned finishes spawning first (see `_live`), so it is stopped below
            life.cancel()
        await asyncio.gather(*lives, return_exceptions=True)
        workers = list(self.workers)
        await asyncio.gather(*(worker.process.stop(grace_s) for worker in workers))
        for worker in workers:
            if worker.exited is not None:
                worker.exited.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await worker.exited
            worker.process.discard_log()
        self.workers.clear()

    # ---------------------------------------------------------------- calls

    async def acquire(self, timeout_s: float | None) -> WarmWorker:
        """A ready worker with a free slot (its `calls` already counted); start one if the pool may grow.

        Waits for a slot up to `timeout_s` seconds (`None`: as long as it takes).

        Raises:
            WarmUnavailable: the workers keep failing to start, or no slot freed up in time.
        """
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        async with self._changed:
            while True:
                if self._closing:
                    raise WarmUnavailable(f"the server is stopping; tool {self.tool.name!r} takes no more calls")
                free = [w for w in self.workers if w.ready and w.calls < self.spec.concurrency]
                if free:
                    worker = min(free, key=lambda w: w.calls)
                    worker.calls += 1
                    return worker
                starting = any(not w.ready and not w.stopping for w in self.workers)
                if not starting and len(self.workers) < self.spec.max_workers:
                    self._start_worker_soon()  # after the back-off, if starts failed
                if self._failed_starts >= FAILED_STARTS_LIMIT and not any(w.ready for w in self.workers):
                    raise WarmUnavailable(
                        f"the warm workers of tool {self.tool.name!r} fail to start ({self._last_failure})"
                    )
                remaining = None if deadline is None else deadline - loop.time()
                if remaining is not None and remaining <= 0:
                    raise WarmBusy(
                        f"all {len(self.workers)} warm worker(s) of tool {self.tool.name!r} stayed busy "
                        f"for {timeout_s:g}s"
                    )
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(remaining, 1.0) if remaining is not None else 1.0):
                        await self._changed.wait()

    def next_worker(self) -> WarmWorker | None:
        """The ready worker `acquire` would give the next slot on if it has one free (the least busy), without
        taking a slot; `None` when none is ready.
        """
        ready = [w for w in self.workers if w.ready and not w.stopping]
        return min(ready, key=lambda w: w.calls) if ready and not self._closing else None

    async def release(self, worker: WorkerSlot) -> None:
        """A call on `worker` ended: its slot is free again."""
        assert isinstance(worker, WarmWorker)
        async with self._changed:
            worker.calls = max(worker.calls - 1, 0)
            worker.last_used = self._now()
            self._changed.notify_all()

    async def kill(self, worker: WorkerSlot) -> None:
        """Stop `worker` at once (a call on it ignored its cancel); the pool replaces it."""
        assert isinstance(worker, WarmWorker)
        worker.stopping = True
        logger.warning("tool %s: killing warm worker pid %s (a call did not stop)", self.tool.name, worker.process.pid)
        await worker.process.stop(0)

    # ---------------------------------------------------------------- worker life

    def _start_worker_soon(self) -> None:
        """Start one worker now, or when the back-off after failed starts allows (it is counted at once)."""
        if self._closing:
            return
        self._serial += 1
        port = _free_port()
        env = {
            contract.ENV_SERVE_PORT: str(port),
            contract.ENV_SERVE_HOST: "127.0.0.1",
            contract.ENV_SERVE_CONCURRENCY: str(self.spec.concurrency),
            contract.ENV_SERVE_TOOL: self.tool.name,
            contract.ENV_SERVE_CALL_KEY: self.call_key,
            contract.ENV_SERVE_PARENT_PID: str(os.getpid()),
        }
        log = self.runs_dir / f"warm-{self.tool.name}-{os.getpid()}-{self._serial}.stderr"
        worker = WarmWorker(ToolProcess(self.tool, env, log), port, started_at=self._now())
        self.workers.append(worker)
        self._lives.add(asyncio.create_task(self._run_worker(worker), name=f"warm-{self.tool.name}-{self._serial}"))

    async def _run_worker(self, worker: WarmWorker) -> None:
        try:
            await self._live(worker)
        finally:
            task = asyncio.current_task()
            if task is not None:
                self._lives.discard(task)

    async def _live(self, worker: WarmWorker) -> None:
        delay = self._next_start - self._now()
        if delay > 0:
            await asyncio.sleep(delay)
        if self._closing:
            await self._forget(worker)
            return
        spawning = asyncio.ensure_future(worker.process.start())
        try:
            await asyncio.shield(spawning)
        except asyncio.CancelledError:  # the pool closes: let the spawn finish, so `aclose` stops the process
            with contextlib.suppress(OSError):
                await spawning
            raise
        except OSError as exc:
            await self._failed(worker, f"cannot start {self.tool.manifest.container.command[0]!r}: {exc}")
            return
        metrics.WARM_WORKER_STARTS.labels(self.tool.name).inc()
        worker.exited = asyncio.create_task(worker.process.wait())
        if not await self._until_ready(worker):
            exited = worker.exited.done()
            await worker.process.stop(0)
            tail = worker.process.stderr_tail()[-500:]
            why = (
                f"it exited with {worker.exited.result()} before answering {contract.PATH_HEALTH}"
                if exited
                else f"it did not answer {contract.PATH_HEALTH} within {READY_TIMEOUT_S:g}s"
            )
            await self._failed(worker, f"{why}; its last output: {tail or '(none)'}")
            return
        async with self._changed:
            worker.ready = True
            worker.last_used = self._now()
            self._failed_starts = 0  # the command works
            self._changed.notify_all()
        logger.info("tool %s: warm worker pid %s ready on port %s", self.tool.name, worker.process.pid, worker.port)
        code = await worker.exited
        if self._closing:
            return
        if not worker.stopping:
            tail = worker.process.stderr_tail()[-500:]
            logger.warning(
                "tool %s: warm worker pid %s exited with %s: %s", self.tool.name, worker.process.pid, code, tail
            )
            if self._now() - worker.started_at < STABLE_S:  # a crash loop: back off, as for a failed start
                self._quick_exits += 1
                self._next_start = self._now() + _backoff(self._quick_exits)
            else:
                self._quick_exits = 0
        await self._forget(worker)

    async def _until_ready(self, worker: WarmWorker) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + READY_TIMEOUT_S
        while loop.time() < deadline:
            if worker.exited is not None and worker.exited.done():
                return False
            if await self._healthy(worker):
                return True
            await asyncio.sleep(0.02)
        return False

    async def _healthy(self, worker: WarmWorker) -> bool:
        try:
            async with asyncio.timeout(2.0):
                async with self.session.get(worker.base_url + contract.PATH_HEALTH) as response:
                    await response.read()
                    return response.status == 200
        except (aiohttp.ClientError, OSError, TimeoutError):
            return False

    async def _failed(self, worker: WarmWorker, why: str) -> None:
        """A start that never became ready."""
        self._failed_starts += 1
        self._last_failure = why
        backoff = _backoff(self._failed_starts)
        self._next_start = self._now() + backoff
        logger.warning("tool %s: warm worker failed: %s; next start in %.1fs", self.tool.name, why, backoff)
        await self._forget(worker)

    async def _forget(self, worker: WarmWorker) -> None:
        async with self._changed:
            if worker in self.workers:
                self.workers.remove(worker)
            self._changed.notify_all()
        worker.process.discard_log()

    async def _maintain(self) -> None:
        """Top up to `minWorkers`, stop idle workers above it, replace workers that fail health checks."""
        next_health = self._now() + HEALTH_INTERVAL_S
        while True:
            now = self._now()
            async with self._changed:
                if self._failed_starts > 0 and self._next_start > now:
                    pass  # backing off; a waiting call keeps its place
                elif len(self.workers) < self.spec.min_workers and not any(
                    not w.ready and not w.stopping for w in self.workers
                ):
                    self._start_worker_soon()
                idle = [
                    w
                    for w in self.workers
                    if w.ready and w.calls == 0 and now - w.last_used >= self.spec.idle_timeout_seconds
                ]
                surplus = idle[: max(len(self.workers) - self.spec.min_workers, 0)]
                for worker in surplus:
                    worker.ready = False  # takes no new calls while it stops
                    worker.stopping = True
            for worker in self.workers:
                worker.process.trim_log()  # stderr stays under its cap, as a one-shot run's
            for worker in surplus:
                logger.info("tool %s: stopping idle warm worker pid %s", self.tool.name, worker.process.pid)
                await worker.process.stop(self.tool.execution.cancel_grace_seconds)
            if now >= next_health:
                next_health = now + HEALTH_INTERVAL_S
                for worker in [w for w in self.workers if w.ready]:
                    if await self._healthy(worker):
                        worker.health_failures = 0
                    else:
                        worker.health_failures += 1
                        if worker.health_failures >= 3:
                            worker.stopping = True
                            pid = worker.process.pid
                            logger.warning("tool %s: warm worker pid %s is unhealthy", self.tool.name, pid)
                            await worker.process.stop(self.tool.execution.cancel_grace_seconds)
            await asyncio.sleep(MAINTAIN_INTERVAL_S)


@dataclass(slots=True, eq=False)
class RemoteWorker:
    """One warm pod as a slot holder: its address and the calls this process runs on it now."""

    base_url: str
    calls: int = 0


class EndpointPool:
    """The warm workers of one tool that run elsewhere (a warm Deployment's ready pods, Kubernetes).

    Args:
        tool: the tool (`tool.warm` set; `concurrency` bounds the calls this process puts on one pod).
        session: the HTTP session calls use.
        endpoints: the ready workers' `host:port`, as of now (the McpTool's `status.warm.endpoints`).
        kill: stops the pod at an address (`http://host:port`); its Deployment replaces it.
        tls: how the pods' HTTPS is verified (the chart's `tls.warmWorkers`); `None`: plain HTTP.
    """

    def __init__(
        self,
        tool: ToolSpec,
        session: aiohttp.ClientSession,
        endpoints: Callable[[], Sequence[str]],
        kill: Callable[[str], Awaitable[None]],
        tls: PeerTls | None = None,
    ) -> None:
        assert tool.warm is not None
        self.tool = tool
        self.session = session
        self.tls = tls
        self._endpoints = endpoints
        self._kill = kill
        self._workers: dict[str, RemoteWorker] = {}
        self._changed = asyncio.Condition()

    async def start(self) -> None:
        """Nothing to start: the Deployment runs the workers."""

    async def acquire(self, timeout_s: float | None) -> WorkerSlot:
        """The least busy ready pod below `concurrency` calls; waits (checking twice a second) for one.

        Raises:
            WarmUnavailable: none freed up or became ready within `timeout_s` seconds.
        """
        assert self.tool.warm is not None
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        async with self._changed:
            while True:
                listed = set(self._endpoints())
                for gone in [e for e, w in self._workers.items() if e not in listed and w.calls == 0]:
                    del self._workers[gone]  # a pod that went away
                ready = [self._workers.setdefault(e, RemoteWorker(base_url(e, self.tls))) for e in sorted(listed)]
                free = [w for w in ready if w.calls < self.tool.warm.concurrency]
                if free:
                    worker = min(free, key=lambda w: w.calls)
                    worker.calls += 1
                    return worker
                if deadline is not None and loop.time() >= deadline:
                    raise WarmBusy(
                        f"no warm worker of tool {self.tool.name!r} could take the call within {timeout_s:g}s "
                        f"({len(ready)} ready; kubectl get deploy -l app.kubernetes.io/component=warm-worker)"
                    )
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.5):
                        await self._changed.wait()

    async def release(self, worker: WorkerSlot) -> None:
        """Free the slot."""
        assert isinstance(worker, RemoteWorker)
        async with self._changed:
            worker.calls = max(worker.calls - 1, 0)
            self._changed.notify_all()

    async def kill(self, worker: WorkerSlot) -> None:
        """Stop the pod (a call on it ignored its cancel past the grace period)."""
        logger.warning("tool %s: stopping warm pod %s (a call did not stop)", self.tool.name, worker.base_url)
        await self._kill(worker.base_url)

    async def aclose(self, grace_s: float) -> None:
        """Nothing to stop: the pods are the Deployment's."""
