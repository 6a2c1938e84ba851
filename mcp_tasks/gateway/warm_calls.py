"""`WarmCallExecutor`: on Kubernetes, a synchronous call of a warm tool goes straight to a ready warm worker.

No McpTask, no Job, no API write: the gateway picks one of the ready workers its McpTool's `status.warm`
lists (round robin; the gateway balances itself, so kept-alive connections do not pin it to one pod the
way a ClusterIP Service would), sends the call (`worker.warm.send_call`) and answers with the outcome,
progress reaching the client on the way. Everything else goes to `fallback`, the executor that runs a
call as a hidden task (which the operator runs on a warm pod under its lease, or as a Job for a tool that
is not warm): tools without `spec.warm`, a warm tool with no ready worker (just deployed, scaled away) or
whose workers all refuse the call, and a call that asks for input mid-run. This call cannot be held for
input rounds, so an `idempotent` tool is run again from the start as a hidden task, which can; a tool not
declared idempotent gets a tool error saying so.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Final

import aiohttp

from mcp_tasks.observability import metrics
from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.tasks import results
from mcp_tasks.tasks.interfaces import InlineCall, ToolExecutor
from mcp_tasks.tasks.results import error_result
from mcp_tasks.worker.channel import WorkerChannel
from mcp_tasks.worker.executions import Execution, Finished
from mcp_tasks.worker.tls import PeerTls, base_url
from mcp_tasks.worker.warm import (
    WarmTarget,
    WorkerLost,
    apply_final,
    auth_for,
    call_body,
    cancel_call,
    channel_events,
    send_call,
)
from mcp_tasks.worker.warm_auth import CallAuth, WarmCallSigner

logger = logging.getLogger("mcp_tasks.gateway")

_AGAIN_AS_TASK: Final = object()
"""`_outcome` says: run the call again through the fallback executor."""


class WarmCallExecutor:
    """A `ToolExecutor` that serves warm tools' synchronous calls on their warm workers.

    Args:
        fallback: runs every call this one does not (a `TaskBackedExecutor`).
        endpoints: tool name → `host:port` of its ready warm workers (`KubernetesToolCatalog.warm_endpoints`).
        channel: checks results as the worker API does (CallToolResult, `outputSchema`, the inline cap);
            a synchronous execution never touches its store.
        signer: mints each call's and cancel's credential (the warm-call key the operator's warm pods
            check; the gateways hold it for their synchronous calls, docs/security.md).

    Use `await start()` and `await aclose()` (they own the HTTP session).
    """

    def __init__(
        self,
        fallback: ToolExecutor,
        endpoints: Callable[[str], Sequence[str]],
        channel: WorkerChannel,
        signer: WarmCallSigner,
        tls: PeerTls | None = None,
    ) -> None:
        self.fallback = fallback
        self.tls = tls
        self.signer = signer
        self.endpoints = endpoints
        self.channel = channel
        self._session: aiohttp.ClientSession | None = None
        self._turn: dict[str, int] = {}
        self._cancels: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Open the HTTP session (unbounded pool; connections are kept alive per worker)."""
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=3),
        )

    async def aclose(self) -> None:
        """Close the session (calls in flight end as lost)."""
        if self._cancels:
            await asyncio.wait(self._cancels, timeout=2)
        if self._session is not None:
            await self._session.close()

    async def run_inline(self, call: InlineCall) -> JsonObject:
        """Run `call` on a warm worker of its tool, or through `fallback` (see the module docstring).

        Raises:
            TimeoutError: no outcome within `syncTimeoutSeconds` (the worker is told to stop the call).
            InputNeeded: from `fallback`, as `ToolExecutor.run_inline`.
        """
        tool = call.tool
        endpoints = list(self.endpoints(tool.name)) if tool.warm is not None else []
        if not endpoints or self._session is None:
            return await self.fallback.run_inline(call)
        turn = self._turn.get(tool.name, 0)
        self._turn[tool.name] = turn + 1
        first = turn % len(endpoints)
        execution = Execution(
            tool=tool,
            arguments=call.arguments,
            task_id=None,
            pre_input_responses=dict(call.pre_input_responses),
            owner=call.owner,
            on_progress=call.on_progress,
        )
        body = call_body(tool, execution, None)
        auth = auth_for(self.signer, tool.name, execution)
        outcome: JsonObject | object = _AGAIN_AS_TASK
        async with asyncio.timeout(tool.execution.sync_timeout_seconds):
            for endpoint in endpoints[first:] + endpoints[:first]:
                target = WarmTarget(base_url(endpoint, self.tls), tls=self.tls)
                try:
                    final = await send_call(self._session, target, body, channel_events(self.channel, execution), auth)
                except WorkerLost as exc:
                    if not exc.delivered:
                        logger.info("warm worker %s of %s refused the call: %s", endpoint, tool.name, exc)
                        continue
                    metrics.WARM_CALLS.labels(tool.name, "lost").inc()
                    return results.worker_lost_mid_call(tool.name, str(exc))
                except asyncio.CancelledError:  # past the synchronous wait, or the client is gone
                    self._cancel_soon(target, auth)
                    raise
                outcome = await self._outcome(call, execution, final)
                break
        if outcome is _AGAIN_AS_TASK:
            return await self.fallback.run_inline(call)
        assert isinstance(outcome, dict)
        return outcome

    async def _outcome(self, call: InlineCall, execution: Execution, final: JsonObject) -> JsonObject | object:
        tool = call.tool
        kind = str(final.get("event"))
        metrics.WARM_CALLS.labels(tool.name, kind).inc()
        if kind in {"result", "error"}:
            await apply_final(self.channel, execution, tool, final)
            finished = execution.outcome.result()
            assert isinstance(finished, Finished)
            if finished.result is not None:
                return finished.result
            return error_result(str((finished.error or {}).get("message", "tool failed")))
        if kind == "inputRequired":
            if tool.execution.idempotent:
                logger.info("warm call of %s asked for input; running it again as a task that can take it", tool.name)
                return _AGAIN_AS_TASK
            return error_result(
                f"Tool {tool.name!r} asked for input, which a synchronous call on its warm workers cannot take, "
                "and it is not declared idempotent, so it is not run again as a task that could; call it with "
                "the tasks extension, or declare spec.execution.idempotent"
            )
        if kind == "crashed":
            tail = str(final.get("message", ""))
            return error_result(f"Tool {tool.name!r} raised an exception without a result. Its last output:\n{tail}")
        return error_result(f"The call of {tool.name!r} was stopped on its warm worker")

    def _cancel_soon(self, target: WarmTarget, auth: CallAuth) -> None:
        if self._session is None:
            return
        task = asyncio.get_running_loop().create_task(cancel_call(self._session, target, auth))
        self._cancels.add(task)
        task.add_done_callback(self._cancels.discard)
