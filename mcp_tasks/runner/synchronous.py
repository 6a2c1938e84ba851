"""`SynchronousRuns`: a tool run for a plain `tools/call` (no task), and its promotion when it asks for input.

Nothing is written to the task store unless the tool asks for input mid-run: then the run becomes a hidden
task under this runner's lease (`promote`, one durable write), its process is handed to the supervisor
as a claimed task's is, and `InputNeeded` names the task so the caller can answer in its next round
(SEP-2322 multi-round-trip requests, or a legacy-era call followed on its stream).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Final

from mcp_tasks import aio
from mcp_tasks.observability import metrics
from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.runner.context import RunContext
from mcp_tasks.runner.runs import Runs, ToolRun, cannot_start
from mcp_tasks.runner.supervision import Supervisor
from mcp_tasks.tasks import fair_share, inline, results, transitions
from mcp_tasks.tasks.errors import LimitReached
from mcp_tasks.tasks.ids import TaskId, mint_task_id
from mcp_tasks.tasks.interfaces import FairQueue, InlineCall, InputNeeded, UnfinishedCount
from mcp_tasks.tasks.owner import Owner
from mcp_tasks.tasks.results import error_result
from mcp_tasks.tasks.tools import TaskPolicy, ToolSpec
from mcp_tasks.worker.channel import ChannelError
from mcp_tasks.worker.executions import AskedForInput, Execution, Finished

logger = logging.getLogger("mcp_tasks.runner")

INLINE_RETRY_AFTER_MS: Final = 1000
"""`retryAfterMs` of a synchronous call refused by a running budget: when a slot frees is unknown, so a
second, and the message suggests calling the tool as a task instead."""


def round_share(max_input_rounds: int) -> int:
    """Most synchronous runs one tenant may have parked for input rounds: half of `max_input_rounds`,
    rounded up (at least 1), so a tenant that fills its share still leaves half the places to the others.

    Per tenant, not per principal: the tenant is the isolation boundary, and a tenant of many principals
    could otherwise fill every place with one run each.
    """
    return max(1, -(-max_input_rounds // 2))


class SynchronousRuns:
    """Synchronous runs of one executor (see the module docstring); `promote` is the worker channel's hook."""

    def __init__(self, ctx: RunContext, runs: Runs, supervisor: Supervisor) -> None:
        self.ctx = ctx
        self.runs = runs
        self.supervisor = supervisor
        self._round_tenants: dict[str, str] = {}
        """Tenant of each parked run this executor handed over (task id → tenant), for `round_share`."""
        self._quota_locks = tuple(asyncio.Lock() for _ in range(64))
        """Striped by principal: a promotion's quota count and its create hold one (`promote`)."""

    async def run_inline(self, call: InlineCall) -> JsonObject:
        """Run a tool synchronously (no task) and return its `CallToolResult` (`ToolExecutor`).

        Nothing is written to the task store unless the tool asks for input: then the run becomes a hidden
        task under this runner's lease (`_promote`), its process is handed to a supervisor as a claimed
        task's is, and `InputNeeded` names the task so the caller can answer in its next round.

        The run counts against its principal's and tenant's running budgets while it runs, as a task run
        does (`RunContext.inline_owners`); a call that would exceed one is refused, since a synchronous call
        cannot wait in the queue.

        Raises:
            InputNeeded: the tool asked for input mid-run.
            TimeoutError: it did not finish within `syncTimeoutSeconds`.
            LimitReached: its principal or tenant is at its running budget (429, `retryAfterMs` 1000), or
                it asked for input while its principal holds `max_unfinished_per_principal` unfinished
                tasks (its hidden task would be one more; `promote`), nothing stored.
        """
        owners = self.ctx.inline_owners
        owners[call.owner] += 1  # first, so that concurrent calls of one principal see each other
        try:
            await self._within_budget(call.owner, call.tool)
            return await self._run_inline(call)
        finally:
            owners[call.owner] -= 1
            if owners[call.owner] <= 0:
                del owners[call.owner]

    async def _within_budget(self, owner: Owner, tool: ToolSpec) -> None:
        """Refuse a synchronous run over its running budget (`fair_share.over_budget`); free without budgets.

        Raises:
            LimitReached: naming the budget.
        """
        ctx = self.ctx
        store = ctx.store
        if not ctx.limits.limits_running or not isinstance(store, FairQueue):
            return
        others = ctx.inline_owners.copy()
        others[owner] -= 1  # this run is the one asked about
        usage = fair_share.Usage.counted(await store.running_usage(ctx.clock())).plus(
            fair_share.Usage.of(others.elements())
        )
        held_by = fair_share.over_budget(owner, usage, ctx.limits)
        if held_by is None:
            return
        limits = ctx.limits.for_tenant(owner.tenant)
        maximum = (
            limits.max_running_per_tenant if held_by == "max_running_per_tenant" else limits.max_running_per_principal
        )
        metrics.LIMIT_REFUSALS.labels(held_by, metrics.tenant_label(owner.tenant, ctx.limits.metrics_tenants)).inc()
        whose = "your tenant is" if held_by == "max_running_per_tenant" else "you are"
        queue = (
            ", or call the tool with the tasks extension to wait in the queue"
            if tool.execution.task_policy is not TaskPolicy.NEVER
            else ""
        )
        raise LimitReached(
            f"Not started: {whose} at the limit of {maximum} running tasks ({held_by}); retry later{queue}",
            held_by,
            maximum,
            INLINE_RETRY_AFTER_MS,
        )

    async def _run_inline(self, call: InlineCall) -> JsonObject:
        """`run_inline` within its budget."""
        ctx = self.ctx
        tool = call.tool
        # The id its hidden task gets if it asks for input: the run is then attempt 1 of that task, with
        # the derived token, so a restarted runner can adopt it (or stop it) like any task's run.
        reserved = mint_task_id()
        execution_id = f"{reserved}.1"
        execution = Execution(
            tool=tool,
            arguments=call.arguments,
            task_id=None,
            execution_id=execution_id,
            token=ctx.tokens.token_for(execution_id),
            reserved_task_id=reserved,
            pre_input_responses=dict(call.pre_input_responses),
            owner=call.owner,
            client_capabilities=call.client_capabilities,
            offered_responses=dict(call.input_responses),
            on_progress=call.on_progress,
        )
        process = self.runs.new_run(tool, execution, tool.execution.sync_timeout_seconds)
        grace = tool.execution.cancel_grace_seconds
        # one bound for the whole call: waiting for a warm slot counts against syncTimeoutSeconds too
        deadline = asyncio.get_running_loop().time() + tool.execution.sync_timeout_seconds
        ctx.executions.add(execution)
        handed_over = False
        try:
            try:
                await process.start()
                metrics.RUNS_STARTED.labels(tool.name).inc()
            except OSError as exc:
                message = cannot_start(tool, exc)
                return error_result(message[0].upper() + message[1:])
            exited = asyncio.create_task(process.wait(), name=f"inline-{tool.name}")
            try:
                async with asyncio.timeout_at(deadline):
                    await aio.first_of(asyncio.shield(exited), asyncio.shield(execution.outcome))
                    if not execution.outcome.done():
                        # Exited first: give a racing result POST a moment, then conclude from the exit.
                        await asyncio.wait({execution.outcome}, timeout=0.05)
                outcome = execution.outcome.result() if execution.outcome.done() else None
                promoted = isinstance(outcome, AskedForInput) and outcome.task_id is not None
                if promoted and not exited.done() and not ctx.closing:
                    assert isinstance(outcome, AskedForInput) and outcome.task_id is not None
                    self._hand_over(outcome.task_id, tool, process, execution, exited)
                    handed_over = True
                    raise InputNeeded(tool.name, outcome.task_id)
                if isinstance(outcome, Finished) and not exited.done():
                    # The result is in: let the tool finish its own clean-up, as a task's tool may.
                    await asyncio.wait({exited}, timeout=max(grace, 1.0))
            finally:
                if not handed_over:
                    await process.stop(grace)
                    exited.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await exited
                    if execution.task_id is not None:  # promoted, then stopped (timeout, caller gone, exit)
                        await asyncio.shield(self._settle_stopped_promotion(execution.task_id, tool))
            if not execution.outcome.done():
                if process.worker_lost and not process.delivered:
                    return error_result(f"No warm worker of {tool.name!r} took the call ({process.stderr_tail()})")
                if process.worker_lost:
                    return results.worker_lost_mid_call(tool.name, process.stderr_tail())
                return results.exited_without_result(tool.name, exited.result(), process.stderr_tail())
            outcome = execution.outcome.result()
            if isinstance(outcome, AskedForInput):
                if outcome.refused is not None:
                    raise outcome.refused
                if ctx.closing:
                    return error_result(f"The server stopped while {tool.name!r} asked for input; call it again")
                if execution.task_id is not None:  # promoted, but its process ended before the hand-over
                    code = exited.result() if exited.done() and not exited.cancelled() else None
                    return results.exited_without_result(tool.name, code, process.stderr_tail())
                raise InputNeeded(tool.name)
            if outcome.result is not None:
                return outcome.result
            return error_result(str((outcome.error or {}).get("message", "tool failed")))
        finally:
            if not handed_over:
                ctx.executions.remove(execution)
                process.discard_log()

    async def promote(
        self, execution: Execution, requests: list[tuple[str, JsonObject]], round_id: str | None
    ) -> list[str]:
        """`Promote` for the worker channel: the synchronous run asking for input becomes a hidden task.

        The task is created already claimed by this runner (lease, attempt 1) and parked on `requests`, in
        one durable write, so no other runner starts it again and the caller's next round finds it.
        Requests that the call's up-front `inputResponses` answer validly are answered in that same write.

        The hidden task is one more unfinished task of the caller (`execution.owner`, the principal
        `run_inline` was given): over its `max_unfinished_per_principal` nothing is written, the tool's
        ask is refused and the call answers the quota's `LimitReached` (429), as a task-augmented call
        would. The creation rates do not apply: they hold back requests to create tasks, and this call
        was admitted as a synchronous one (its running budget); a run may ask only once it runs, and the
        parked runs are bounded by the round cap and its per-tenant share below.

        Parked runs are bounded by `max_input_rounds` (`MCPTASKS_MAX_INPUT_ROUNDS`) and no tenant may hold
        more than `round_share` of them, so one tenant cannot take every place from the others; the
        refusals name no count of anyone's.

        Raises:
            InputCapabilityMissing: the caller did not declare a capability a request needs (nothing written;
                checked first).
            ChannelError: 429 when `max_input_rounds` synchronous runs are parked already, or the caller's
                tenant holds its `round_share`, or the caller is at its unfinished-task quota (the call
                then answers `LimitReached`).
        """
        ctx = self.ctx
        assert execution.tool is not None and execution.owner is not None  # run_inline sets both
        assert execution.reserved_task_id is not None
        owner = execution.owner
        now = ctx.clock()
        fresh = transitions.new_task(
            TaskId(execution.reserved_task_id),
            owner,
            execution.tool,
            execution.arguments,
            now,
            execution.pre_input_responses,
            execution.client_capabilities,
        )
        claimed = transitions.claim(inline.hidden(fresh), ctx.holder, now, ctx.lease, inline.INLINE_TTL_MS)
        parked, minted = transitions.add_input_requests(claimed, requests, now, round_id)  # capability first
        offered = inline.offered_answers(parked, execution.offered_responses)
        if offered:
            parked = transitions.answer_input_requests(parked, offered, now)
        cap = ctx.settings.max_input_rounds
        if len(ctx.in_rounds) >= cap:
            raise ChannelError(
                429,
                "the server holds too many synchronous calls waiting for their clients' input "
                "(MCPTASKS_MAX_INPUT_ROUNDS); call again later, or call with the tasks extension",
            )
        if sum(1 for tenant in self._round_tenants.values() if tenant == owner.tenant) >= round_share(cap):
            raise ChannelError(
                429,
                "your tenant holds its share of the synchronous calls that may wait for input (half of "
                "MCPTASKS_MAX_INPUT_ROUNDS); answer or abandon one of them, call again later, or call with "
                "the tasks extension",
            )
        # The count and the create hold one lock of the principal's, so its runs asking at once on this
        # executor cannot both take its last free place (a task-augmented call on the gateway, which holds
        # its own, still can, by one each).
        async with self._quota_locks[hash(owner) % len(self._quota_locks)]:
            refused = await self._over_quota(owner)
            if refused is not None:
                execution.settle(AskedForInput(refused=refused))
                raise ChannelError(429, str(refused))
            stored = await ctx.store.create(parked)
        execution.task_id = stored.task_id
        execution.settle(AskedForInput(stored.task_id))
        logger.info(
            "synchronous call of %s asked for input; it continues as hidden task %s", stored.tool, stored.task_id
        )
        return minted

    async def _over_quota(self, owner: Owner) -> LimitReached | None:
        """The refusal when `owner` holds its `max_unfinished_per_principal` unfinished tasks already (one
        indexed count in the task store, up to the quota), else `None`; free without a quota.
        """
        ctx = self.ctx
        quota = ctx.limits.for_tenant(owner.tenant).max_unfinished_per_principal
        store = ctx.store
        if not quota or not isinstance(store, UnfinishedCount):
            return None
        held = await store.unfinished_of(owner, quota)
        if fair_share.over_quota(held, owner, ctx.limits) is None:
            return None
        metrics.LIMIT_REFUSALS.labels(
            "max_unfinished_per_principal", metrics.tenant_label(owner.tenant, ctx.limits.metrics_tenants)
        ).inc()
        return LimitReached(
            f"Too many unfinished tasks: you hold {held}, the most allowed (max_unfinished_per_principal), and "
            "this call asked for input, which would make one more; wait for some to finish, or cancel some with "
            "tasks/cancel, then call again",
            "max_unfinished_per_principal",
            quota,
        )

    def _hand_over(
        self, task_id: str, tool: ToolSpec, process: ToolRun, execution: Execution, exited: asyncio.Task[int | None]
    ) -> None:
        """Supervise a promoted run's live process as a claimed task's (lease renewal, deadline, cancel)."""
        ctx = self.ctx
        assert execution.owner is not None  # run_inline sets it
        self._round_tenants[task_id] = execution.owner.tenant

        async def follow() -> None:
            try:
                await self.supervisor.recorded(task_id, tool, process, execution)
                await self.supervisor.follow(task_id, tool, process, execution, exited)
            finally:
                self._round_tenants.pop(task_id, None)
                ctx.executions.remove(execution)
                process.discard_log()

        self.supervisor.spawn(task_id, tool, follow(), in_rounds=True)

    async def _settle_stopped_promotion(self, task_id: str, tool: ToolSpec) -> None:
        """A promoted run was stopped before its caller saw the input requests: its hidden task is cancelled."""
        await self.ctx.finish_if_running(
            task_id, lambda r, now: transitions.cancel(r, now, f"The synchronous call of {tool.name!r} ended first")
        )
