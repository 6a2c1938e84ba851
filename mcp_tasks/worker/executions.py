"""Executions: one per running tool process, task or synchronous, addressed by the worker API.

An execution holds the per-process worker token and, for a synchronous run, the future its result
arrives on. The worker API finds them through an `ExecutionLookup`: the embedded runner keeps an
in-memory `ExecutionTable` (a process cannot outlive the lease that covers it, and after a restart
the lease rules decide what happens to its task); the operator derives them from the McpTask and a
per-task credential, so they survive an operator restart.
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
from dataclasses import dataclass, field
from typing import Protocol

from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.tasks.errors import LimitReached
from mcp_tasks.tasks.interfaces import ProgressSink
from mcp_tasks.tasks.owner import Owner
from mcp_tasks.tasks.record import ArgumentsRef
from mcp_tasks.tasks.tools import ToolSpec


@dataclass(frozen=True, slots=True)
class Finished:
    """The tool posted its result (`result`: a `CallToolResult`) or a JSON-RPC `error`."""

    result: JsonObject | None = None
    error: JsonObject | None = None
    status_message: str | None = None


@dataclass(frozen=True, slots=True)
class AskedForInput:
    """A synchronous run asked for input: it now runs as hidden task `task_id`, parked for the caller's
    next round (SEP-2322), or `task_id` is `None` when its caller can take no rounds (it must stop), or
    when `refused` says why its hidden task could not be created (its caller's unfinished-task quota:
    the call then answers that error, as a task-augmented call over the quota does).
    """

    task_id: str | None = None
    refused: LimitReached | None = None


Outcome = Finished | AskedForInput


@dataclass(slots=True)
class Execution:
    """One tool process's view on the worker API.

    `task_id` is `None` for a synchronous run until it asks for input and becomes a hidden task (then it
    names that task); `outcome` resolves when the tool posts its result or, for a synchronous run, asks.
    `owner` and `client_capabilities` are the synchronous caller's: `None` capabilities mean the caller
    can take no input rounds (a legacy-era call); `offered_responses` are the answers its request
    offered up front (SEP-2322), `reserved_task_id` the id its hidden task takes if it asks, and
    `on_progress` hears its progress. `unrecorded` is the final outcome the tool posted while the task
    store could not take it (answered 503): its supervisor records it once the store writes again, or keeps
    it for the next start when the executor stops first (`runner.outcomes`). `handed_over` is set when a
    stopping executor left the run's process to the next start (its stderr file is kept for it).
    """

    tool: ToolSpec | None
    arguments: JsonObject
    task_id: str | None
    arguments_ref: ArgumentsRef | None = None
    """Set when the task's arguments are its artifact (`arguments` is then empty): `WorkerChannel.arguments`."""
    attempt: int = 1
    pre_input_responses: JsonObject = field(default_factory=dict)
    execution_id: str = field(default_factory=lambda: secrets.token_hex(8))
    token: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    traceparent: str | None = None
    owner: Owner | None = None
    client_capabilities: JsonObject | None = None
    offered_responses: JsonObject = field(default_factory=dict)
    reserved_task_id: str | None = None
    on_progress: ProgressSink | None = None
    outcome: asyncio.Future[Outcome] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    unrecorded: Finished | None = None
    handed_over: bool = False

    def authorizes(self, presented: str) -> bool:
        """Constant-time check of a presented bearer token."""
        return hmac.compare_digest(presented.encode(), self.token.encode())

    def settle(self, outcome: Outcome) -> bool:
        """Record the outcome once; False when one was already recorded."""
        if self.outcome.done():
            return False
        self.outcome.set_result(outcome)
        return True


class ExecutionPending(Exception):
    """The execution exists but is not ready to be served yet (being started or adopted): retry (503)."""


class ExecutionLookup(Protocol):
    """How the worker API finds the execution a request addresses."""

    async def resolve(self, execution_id: str, token: str) -> Execution | None:
        """The execution if `token` authorizes it, else `None` (unknown and unauthorized look alike).

        Raises:
            ExecutionPending: it will be served shortly; the worker API answers 503 so the tool retries.
        """
        ...


class ExecutionTable:
    """Executions by id, for the worker API to find the one a request addresses."""

    def __init__(self) -> None:
        self._by_id: dict[str, Execution] = {}

    def add(self, execution: Execution) -> None:
        """Register an execution before its process starts."""
        self._by_id[execution.execution_id] = execution

    def remove(self, execution: Execution) -> None:
        """Forget an execution after its process exited."""
        self._by_id.pop(execution.execution_id, None)

    def find(self, execution_id: str, token: str) -> Execution | None:
        """The execution if `token` is its own, else `None` (unknown and unauthorized look alike)."""
        execution = self._by_id.get(execution_id)
        if execution is None or not execution.authorizes(token):
            return None
        return execution

    async def resolve(self, execution_id: str, token: str) -> Execution | None:
        """`ExecutionLookup`: same as `find`."""
        return self.find(execution_id, token)

    def __len__(self) -> int:
        return len(self._by_id)


class ChainedLookup:
    """Several `ExecutionLookup`s asked in turn; the first one that knows the execution answers.

    The operator's worker API serves Job pods (`TaskExecutions`) and warm pods (`WarmTaskRunner`) on one port.
    """

    def __init__(self, *lookups: ExecutionLookup) -> None:
        self.lookups = lookups

    async def resolve(self, execution_id: str, token: str) -> Execution | None:
        """`ExecutionLookup`: the first lookup's execution, or `None` when none knows it.

        Raises:
            ExecutionPending: from the lookup that knows it.
        """
        for lookup in self.lookups:
            found = await lookup.resolve(execution_id, token)
            if found is not None:
                return found
        return None
