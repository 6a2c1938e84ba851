"""A task's or synchronous call's run on a warm worker, with the interface of a `ToolProcess`.

`WarmRun` sends one call to a slot of the tool's `WarmWorkers` and follows its NDJSON events, so the
runner supervises a warm run (lease, deadline, cancel) exactly as it supervises a process.
`AdoptedWarmCall` is a call a crashed runner left running on a local worker (sent with `detachSeconds`):
a restarted runner re-attaches to it by execution id (`GET /v1/calls/{id}`, runtime/serve.py) and
records its outcome, as it adopts a process (docs/design.md §7).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from dataclasses import dataclass, field
from typing import Final

import aiohttp

from mcp_tasks.observability import metrics
from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.runner import identity
from mcp_tasks.runner.warm_pool import (
    REFUSED_BACKOFF_FIRST_S,
    REFUSED_BACKOFF_MAX_S,
    WarmBusy,
    WarmUnavailable,
    WarmWorker,
    WarmWorkers,
    WorkerSlot,
)
from mcp_tasks.runtime import contract
from mcp_tasks.tasks import results
from mcp_tasks.tasks.errors import StoreUnavailable
from mcp_tasks.tasks.tools import ToolSpec
from mcp_tasks.worker.channel import ChannelError, WorkerChannel
from mcp_tasks.worker.executions import Execution
from mcp_tasks.worker.tls import PeerTls, base_url, endpoint_of
from mcp_tasks.worker.warm import WarmTarget, WorkerLost, apply_final, call_body, cancel_call, channel_events, send_call
from mcp_tasks.worker.warm_auth import CallAuth, SessionUnavailable

logger = logging.getLogger("mcp_tasks.runner")

REATTACH_WAIT_S: Final = 5.0
"""How long one re-attach request waits for a detached call's outcome, in seconds (the worker caps it)."""
REATTACH_RETRY_S: Final = 0.5
"""Pause before re-attaching again after the worker could not be reached (while its process lives), in seconds."""
REMOTE_UNREACHABLE_S: Final = 15.0
"""How long a pod that holds a detached call may stay unreachable before the call counts as lost, in seconds."""


async def conclude(
    channel: WorkerChannel, execution: Execution, tool: ToolSpec, final: JsonObject
) -> tuple[int | None, str]:
    """Record a warm call's final event; return `(exit code, what ended it)` as a process would exit.

    0 with an outcome recorded (`result`/`error`, or a crash recorded as an `isError` result), 143 for a
    call that was cancelled, 1 for one that ended without an outcome.
    """
    kind = final.get("event")
    metrics.WARM_CALLS.labels(tool.name, str(kind)).inc()
    try:
        if kind in {"result", "error"}:
            await apply_final(channel, execution, tool, final)
            return 0, ""
        if kind == "crashed":
            tail = str(final.get("message", ""))
            text = f"Tool {tool.name!r} raised an exception without a result. Its last output:\n{tail}"
            await apply_final(channel, execution, tool, {"result": results.error_result(text)})
            return 1, tail
    except ChannelError as exc:
        logger.info("warm call %s: outcome not recorded: %s", execution.execution_id, exc)
        return 0, ""
    return (143 if kind == "cancelled" else 1), f"the call ended with {kind!r}"


@dataclass(eq=False)
class WarmRun:
    """One call of `execution` on a pool's worker, with the interface of a `ToolProcess`.

    `start` takes a worker slot (waiting up to `acquire_timeout_s`); the call's status and progress go
    to the channel, and its `result`/`error` final event is recorded through the channel like a one-shot
    run's `POST /result`. `stop` sends the cancel, waits the grace period, then kills the worker.
    `worker_lost` is True when the worker died mid-call (the outcome is unknown), or when no worker took
    the call after three tries (`delivered` False: it never ran).
    """

    pool: WarmWorkers
    execution: Execution
    channel: WorkerChannel
    worker_api_url: str
    auth: CallAuth
    """Mints the call's credentials (each try of the call and its cancel gets a fresh one)."""
    acquire_timeout_s: float | None
    detach_s: float = 0.0
    """> 0: a task's call that outlives a crash of its runner, its outcome kept this long (runtime/serve.py)."""
    worker_lost: bool = field(default=False, init=False)
    delivered: bool = field(default=True, init=False)
    """False: the call never reached a worker (safe to run again)."""
    delivering: bool = field(default=False, init=False)
    """The call is being sent to, or runs on, a worker."""
    _worker: WorkerSlot | None = field(default=None, init=False)
    _call: asyncio.Task[int | None] | None = field(default=None, init=False)
    _tail: str = field(default="", init=False)

    @property
    def tool(self) -> ToolSpec:
        """The tool as its pool has it."""
        return self.pool.tool

    @property
    def pid(self) -> int | None:
        """The pid of the local worker running the call (adoptable with `warm_endpoint`); `None` for a pod."""
        return self._worker.process.pid if isinstance(self._worker, WarmWorker) else None

    @property
    def warm_endpoint(self) -> str | None:
        """`host:port` of the worker running the call (where a restarted runner re-attaches), once started."""
        if self._worker is None:
            return None
        return endpoint_of(self._worker.base_url)

    async def start(self) -> None:
        """Take a worker slot and send the call.

        Raises:
            WarmUnavailable: no worker could take it.
        """
        self._worker = await self.pool.acquire(self.acquire_timeout_s)
        self._call = asyncio.create_task(self._follow(), name=f"warm-call-{self.execution.execution_id}")

    async def _follow(self) -> int | None:
        assert self._worker is not None
        body = call_body(self.tool, self.execution, self.worker_api_url)
        if self.execution.arguments_ref is not None:  # the task's arguments are its artifact: read them back
            try:
                body["arguments"] = await self.channel.arguments(self.execution)
            except ChannelError as exc:  # lost for good: the run ends as a tool that could not start would
                await self.pool.release(self._worker)
                self._worker, self._tail = None, str(exc)
                return 1
            except (OSError, StoreUnavailable) as exc:  # not now: the call never reached a worker, run it again
                await self.pool.release(self._worker)
                self._worker, self._tail = None, f"the task's arguments cannot be read now: {exc}"
                self.worker_lost, self.delivered = True, False
                return None
        if self.detach_s > 0:
            body["detachSeconds"] = self.detach_s
        backoff_s = REFUSED_BACKOFF_FIRST_S
        refusals = 0
        try:
            while True:
                target = WarmTarget(self._worker.base_url, self.worker_api_url, self.pool.tls)
                try:
                    on_event = channel_events(self.channel, self.execution)
                    self.delivering = True
                    final = await send_call(self.pool.session, target, body, on_event, self.auth)
                    break
                except WorkerLost as exc:
                    self.delivering = False
                    if exc.delivered:
                        raise
                    # It refused the call (busy with other callers' calls, gone, not this tool's): never ran.
                    # A synchronous call tries three times; a task keeps trying (its supervisor stops it).
                    refusals += 1
                    await self.pool.release(self._worker)
                    self._worker = None
                    if self.execution.task_id is None and refusals >= 3:
                        raise
                    await asyncio.sleep(backoff_s)
                    backoff_s = min(backoff_s * 2, REFUSED_BACKOFF_MAX_S)
                    self._worker = await self._reacquire()
        except WorkerLost as exc:
            metrics.WARM_CALLS.labels(self.tool.name, "lost" if exc.delivered else "unavailable").inc()
            self.worker_lost = True
            self.delivered = exc.delivered
            self._tail = str(exc)
            return None
        except WarmUnavailable as exc:  # no worker took it after a refusal: it did not run
            metrics.WARM_CALLS.labels(self.tool.name, "unavailable").inc()
            self.worker_lost, self.delivered = True, False
            self._tail = str(exc)
            return None
        finally:
            if self._worker is not None:
                await self.pool.release(self._worker)
        return await self._conclude(final)

    async def _reacquire(self) -> WorkerSlot:
        """A slot again after a refusal: a task waits for one as long as it takes."""
        while True:
            try:
                return await self.pool.acquire(self.acquire_timeout_s)
            except WarmBusy:
                if self.execution.task_id is None:
                    raise

    async def _conclude(self, final: JsonObject) -> int | None:
        code, self._tail = await conclude(self.channel, self.execution, self.tool, final)
        return code

    async def wait(self) -> int | None:
        """Wait for the call to end: 0 with an outcome recorded, 143 cancelled, `None` if the worker was lost."""
        if self._call is None:
            raise RuntimeError("call not started")
        try:
            return await asyncio.shield(self._call)
        except asyncio.CancelledError:
            if self._call.cancelled():  # `stop` withdrew a call no worker had taken
                return 143
            raise

    async def stop(self, grace_s: float) -> None:
        """Cancel the call; past `grace_s` seconds kill its worker (the pool starts another)."""
        if self._call is None or self._call.done():
            return
        worker = self._worker
        if not self.delivering:  # waiting for a worker to take it: it never ran, nothing to cancel there
            self._call.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._call
            return
        if worker is not None:
            await cancel_call(self.pool.session, WarmTarget(worker.base_url, tls=self.pool.tls), self.auth)
        try:
            async with asyncio.timeout(grace_s):
                await asyncio.shield(self._call)
        except TimeoutError:
            if worker is not None:
                await self.pool.kill(worker)
        with contextlib.suppress(Exception):
            await asyncio.shield(self._call)

    def trim_log(self) -> None:
        """Nothing to trim: the worker's stderr belongs to the pool."""

    def stderr_tail(self) -> str:
        """What ended the call without a result (the traceback, or how the worker was lost)."""
        return self._tail

    def discard_log(self) -> None:
        """Nothing to discard (see `trim_log`)."""


@dataclass(eq=False)
class AdoptedWarmCall:
    """A detached call on a local warm worker that outlived its runner, followed by re-attaching.

    Fields:
        session: the HTTP session.
        tool: the task's tool.
        execution: the run's worker-API view (same execution id and token as before the crash).
        channel: records the outcome.
        auth: mints each re-attach's and the cancel's credential (the same caller as the call's).
        warm_endpoint: the worker's `host:port`.
        pid, process_identity: the local worker process (`identity.of`), to tell it is still alive; `None`
            and `""` for a pod, which counts as gone once unreachable for `REMOTE_UNREACHABLE_S`.
        tls: how the worker's HTTPS is verified (pods with the chart's `tls.warmWorkers`); `None`: plain HTTP.
    """

    delivered = True  # it ran: a loss now is a loss mid-call (a class attribute, not a field)

    session: aiohttp.ClientSession
    tool: ToolSpec
    execution: Execution
    channel: WorkerChannel
    auth: CallAuth
    warm_endpoint: str
    pid: int | None
    process_identity: str
    tls: PeerTls | None = None
    worker_lost: bool = field(default=False, init=False)
    base_url: str = field(init=False)
    """The worker's `http(s)://host:port`, from `warm_endpoint` and `tls`."""
    _follow: asyncio.Task[int | None] | None = field(default=None, init=False)
    _tail: str = field(default="", init=False)

    def __post_init__(self) -> None:
        self.base_url = base_url(self.warm_endpoint, self.tls)

    async def start(self) -> None:
        """Nothing to start: the call runs already."""

    def _alive(self, unreachable_since: float) -> bool:
        """Whether the worker may still answer: its local process lives, or a pod was reachable lately."""
        if self.pid is not None:
            return identity.is_alive(self.pid, self.process_identity)
        return asyncio.get_running_loop().time() - unreachable_since < REMOTE_UNREACHABLE_S

    async def _reattach(self) -> int | None:
        path = f"{contract.PATH_CALLS}/{self.execution.execution_id}?waitSeconds={REATTACH_WAIT_S:g}"
        options = {} if self.tls is None else self.tls.request_options()
        unreachable_since: float | None = None
        while True:
            try:
                response = await self.auth.request(
                    self.session, "GET", self.base_url, path, "reattach", options=options
                )
                async with response:
                    if response.status == 200:
                        final = await response.json()
                        code, self._tail = await conclude(self.channel, self.execution, self.tool, final)
                        return code
                    if response.status == 202:
                        unreachable_since = None
                        continue
                    self._tail = f"the warm worker no longer knows the call ({response.status})"
            except (aiohttp.ClientError, OSError, ValueError, SessionUnavailable) as exc:
                if isinstance(exc, SessionUnavailable) and exc.refused:  # it answers, but to another key
                    self._tail = f"the warm worker takes no session of this runner: {exc}"
                else:
                    if unreachable_since is None:
                        unreachable_since = asyncio.get_running_loop().time()
                    if self._alive(unreachable_since):
                        await asyncio.sleep(REATTACH_RETRY_S)
                        continue
                    self._tail = f"the warm worker (pid {self.pid}) is gone: {exc}"
            metrics.WARM_CALLS.labels(self.tool.name, "lost").inc()
            self.worker_lost = True
            return None

    async def wait(self) -> int | None:
        """Wait for the call to end (see `WarmRun.wait`)."""
        if self._follow is None:
            self._follow = asyncio.create_task(self._reattach(), name=f"reattach-{self.execution.execution_id}")
        return await asyncio.shield(self._follow)

    async def stop(self, grace_s: float) -> None:
        """Cancel the call; past `grace_s` seconds kill its worker (nothing else of this runner uses it)."""
        if self._follow is not None and self._follow.done():
            return
        await cancel_call(self.session, WarmTarget(self.base_url, tls=self.tls), self.auth)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace_s):
                await self.wait()
                return
        if self.pid is not None and identity.is_alive(self.pid, self.process_identity):
            with contextlib.suppress(ProcessLookupError):
                identity.signal_group(self.pid, self.process_identity, signal.SIGKILL)

    def trim_log(self) -> None:
        """Nothing to trim: the worker's stderr file belonged to the crashed runner's pool."""

    def stderr_tail(self) -> str:
        """What ended the call without a result, or how the worker was lost."""
        return self._tail

    def discard_log(self) -> None:
        """Nothing to discard."""
