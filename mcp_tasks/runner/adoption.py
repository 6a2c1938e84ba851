"""`Adoption`: runs that outlived their runner (a crash, `kill -9`) are taken over, not started again.

A restarted embedded runner with the same state folder and worker key finds a task whose lease names a
live process of the same worker port (`LeaseProcess`): it takes the lease (`transitions.adopt`, the
attempt goes on) and supervises that process. The tool itself may find the new runner first, when it
calls the worker API with its derived token (`resolve`). A process that cannot be adopted is stopped
before the restart rules decide its task (`stop_orphan`), unless its tool had posted an outcome that a
stopping runner kept because the store could not take it (`record_kept`, `runner.outcomes`). docs/design.md §7.
"""

from __future__ import annotations

import asyncio
import logging

from mcp_tasks.runner import identity
from mcp_tasks.runner.context import RunContext
from mcp_tasks.runner.process import stop_group
from mcp_tasks.runner.supervision import Supervisor
from mcp_tasks.tasks import transitions
from mcp_tasks.tasks.errors import IllegalTransition, TaskNotFound, VersionConflict
from mcp_tasks.tasks.record import LeaseProcess, TaskRecord
from mcp_tasks.tasks.tools import ToolSpec
from mcp_tasks.worker.channel import recording
from mcp_tasks.worker.executions import Execution, ExecutionPending

logger = logging.getLogger("mcp_tasks.runner")


class Adoption:
    """Adopts the live runs of a previous runner (see the module docstring)."""

    def __init__(self, ctx: RunContext, supervisor: Supervisor) -> None:
        self.ctx = ctx
        self.supervisor = supervisor

    async def resolve(self, execution_id: str, token: str) -> Execution | None:
        """`ExecutionLookup` for the worker API: a run of this runner, or one a crashed runner left behind.

        A call from a tool whose runner crashed carries a token this runner can verify (same worker key);
        its run is adopted on the spot when its process still runs. While this runner stops, a verified run
        it no longer serves (one it handed over to the next start) is told to retry, as for one being set
        up: a tool treats a 404 as the end of its run, and the next start adopts it.

        Raises:
            ExecutionPending: the run is being set up or taken over; the tool should retry (503).
        """
        ctx = self.ctx
        found = ctx.executions.find(execution_id, token)
        if found is not None:
            return found
        verified = ctx.tokens.verify(execution_id, token)
        if verified is None:
            return None
        task_id, _attempt = verified
        if task_id in ctx.supervisors:
            raise ExecutionPending(execution_id)
        if ctx.closing:  # a run handed to the next start: retry (503) until that start serves it, never a 404
            raise ExecutionPending(execution_id)
        try:
            record = await ctx.store.get(task_id)
        except TaskNotFound:
            return None
        running = None if record.lease is None else record.lease.process
        if record.status.is_terminal or running is None or running.execution_id != execution_id:
            return None
        assert record.lease is not None  # running is not None
        holder_alive = identity.holder_is_alive(record.lease.holder)
        if holder_alive or (holder_alive is None and record.lease.expires_at > ctx.clock()):
            return None  # a live runner holds it; not ours to take
        tool = ctx.catalog.get_tool(record.tool)
        if tool is None or record.cancel_requested_at is not None:
            return None  # the claim loop stops it and settles the task
        try:
            adopted = await self.adopt(record, tool, running)
        except (VersionConflict, IllegalTransition) as exc:
            raise ExecutionPending(execution_id) from exc
        if adopted is None:
            return None
        return ctx.executions.find(execution_id, token)

    async def adopt(self, record: TaskRecord, tool: ToolSpec, running: LeaseProcess) -> TaskRecord | None:
        """Take over a run whose process outlived its runner; `None` when it cannot be adopted.

        Raises:
            VersionConflict: another runner changed the task first.
        """
        ctx = self.ctx
        on_pod = running.pid == 0 and running.warm_endpoint is not None  # any replica may re-attach
        if not on_pod and (running.worker_port != ctx.port or not identity.is_alive(running.pid, running.identity)):
            return None
        taken = transitions.adopt(record, ctx.holder, ctx.clock(), ctx.lease, tool.execution.ttl_ms)
        adopted = await ctx.write(taken)
        execution = ctx.task_execution(adopted, running.execution_id)
        ctx.executions.add(execution)
        self.supervisor.supervise(adopted, running, execution)
        logger.warning(
            "task %s: adopted %s (pid %s) left running by a previous runner", adopted.task_id, tool.name, running.pid
        )
        return adopted

    async def record_kept(self, record: TaskRecord) -> bool:
        """Record the outcome a stopping runner kept for `record`'s attempt (`runner.outcomes`); True when it did.

        Raises:
            VersionConflict: another runner changed the task first (the kept outcome stays for the next try).
        """
        kept = self.ctx.outcomes
        if kept is None or record.lease is None:
            return False
        outcome = await asyncio.to_thread(kept.find, record.task_id, record.attempt)
        if outcome is None:
            return False
        await self.ctx.write(recording(outcome)(record, self.ctx.clock()))
        await asyncio.to_thread(kept.discard, record.task_id)
        logger.warning("task %s: recorded the outcome its tool posted before the last stop", record.task_id)
        return True

    async def stop_orphan(self, record: TaskRecord, tool: ToolSpec | None) -> None:
        """Stop a live process of a run that cannot be adopted, before the restart rules decide its task."""
        running = None if record.lease is None else record.lease.process
        if running is None or running.pid == 0 or not identity.is_alive(running.pid, running.identity):
            return  # nothing local to stop (a pod's call is stopped through its worker, or left to end)
        grace = tool.execution.cancel_grace_seconds if tool else self.ctx.settings.shutdown_grace_s
        logger.warning("task %s: stopping pid %s left running by a previous runner", record.task_id, running.pid)
        await stop_group(running.pid, running.identity, grace)
