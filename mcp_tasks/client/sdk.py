"""`TasksClientExtension`: the tasks extension for the official `mcp` Python SDK client (SEP-2663).

With it, `Client.call_tool` transparently follows a `CreateTaskResult`: it polls `tasks/get` at the
server's `pollIntervalMs`, answers `inputRequests` through the client's own elicitation / sampling /
roots callbacks and `tasks/update`, and returns the task's final `CallToolResult`; a caller that stops
waiting (its coroutine is cancelled) cancels the task. `resume` follows a known `taskId` again (after
a restart) and `cancel` cancels one. A call that does not become a task but asks for input mid-run
answers an `InputRequiredResult`, whose rounds the SDK itself drives (SEP-2322) with the same callbacks.
It imports only our `protocol` models and the SDK.

Example:
    extension = TasksClientExtension()
    async with Client(url, extensions=[extension], elicitation_callback=ask_user) as client:
        result = await client.call_tool("hello_world", {})
        # later, maybe in another process, with a taskId kept from `on_update`:
        result = await extension.resume(client.session, task_id)
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, ClassVar, Literal

from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientRequestContext, ClientSession
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, ErrorData, InputRequest, Request, Result
from pydantic import TypeAdapter

from mcp_tasks.protocol import constants
from mcp_tasks.protocol.models import (
    CreateTaskResult,
    GetTaskResult,
    TaskRequestParams,
    TaskStatus,
    UpdateTaskRequestParams,
)

_INPUT_REQUEST: TypeAdapter[InputRequest] = TypeAdapter(InputRequest)


class GetTaskRequest(Request[TaskRequestParams, Literal["tasks/get"]]):
    """`tasks/get` (the SDK sets `Mcp-Name` from `params.taskId`)."""

    method: Literal["tasks/get"] = "tasks/get"
    params: TaskRequestParams
    name_param: ClassVar[str | None] = "taskId"


class UpdateTaskRequest(Request[UpdateTaskRequestParams, Literal["tasks/update"]]):
    """`tasks/update`."""

    method: Literal["tasks/update"] = "tasks/update"
    params: UpdateTaskRequestParams
    name_param: ClassVar[str | None] = "taskId"


class CancelTaskRequest(Request[TaskRequestParams, Literal["tasks/cancel"]]):
    """`tasks/cancel`."""

    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskRequestParams
    name_param: ClassVar[str | None] = "taskId"


class _Ack(Result):
    """The empty acknowledgement of `tasks/update` and `tasks/cancel` (`{resultType: "complete"}`)."""

    result_type: str = constants.RESULT_TYPE_COMPLETE


class TaskFailed(MCPError):
    """The task ended `failed`: its JSON-RPC error (`code`, `message`) is this exception's."""


class TaskCancelled(RuntimeError):
    """The task ended `cancelled`."""


class TasksClientExtension(ClientExtension):
    """Declares `io.modelcontextprotocol/tasks` and resolves `resultType: "task"` results.

    Args:
        timeout_s: longest time to follow one task before cancelling it and raising `TimeoutError`.
        on_update: called with every `tasks/get` snapshot (for progress display: `statusMessage`).
    """

    identifier = constants.TASKS_EXTENSION

    def __init__(
        self, timeout_s: float = 3600.0, on_update: Callable[[GetTaskResult], Awaitable[None]] | None = None
    ) -> None:
        self.timeout_s = timeout_s
        self.on_update = on_update

    def claims(self) -> Sequence[ResultClaim[Any]]:
        """The one result shape this extension adds to `tools/call`."""
        return [ResultClaim(result_type=constants.RESULT_TYPE_TASK, model=CreateTaskResult, resolve=self.follow)]

    async def follow(self, created: CreateTaskResult, ctx: ClaimContext) -> CallToolResult:
        """Poll a task to its end, answering its input requests; return its `CallToolResult`.

        If the awaiting coroutine is cancelled (the caller stopped waiting), `tasks/cancel` is sent for
        the task before the cancellation goes on: nobody is left to read its result.

        Raises:
            TaskFailed: the task ended `failed`.
            TaskCancelled: the task ended `cancelled`.
            TimeoutError: it did not finish within `timeout_s` (the task is cancelled first).
        """
        return await self._follow(ctx.session, created.task_id, created.poll_interval_ms)

    async def resume(self, session: ClientSession, task_id: str) -> CallToolResult:
        """Follow a task this principal created earlier (e.g. before a restart) to its end, like `follow`.

        `session` is `Client.session`. Raises as `follow`; an unknown (or foreign) `task_id` raises
        `MCPError` -32602.
        """
        return await self._follow(session, task_id, None)

    async def cancel(self, session: ClientSession, task_id: str) -> None:
        """Ask the server to cancel a task (`tasks/cancel`; SEP-2663 Cancellation).

        Cooperative: the acknowledgement is not proof that the work stopped; `tasks/get` (or `resume`)
        shows the task's final status. An unknown task raises `MCPError` -32602.
        """
        await session.send_request(CancelTaskRequest(params=TaskRequestParams(task_id=task_id)), _Ack)

    async def _follow(self, session: ClientSession, task_id: str, poll_interval_ms: int | None) -> CallToolResult:
        try:
            return await self._poll(session, task_id, poll_interval_ms)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await asyncio.shield(asyncio.wait_for(self.cancel(session, task_id), 10))
            raise

    async def _poll(self, session: ClientSession, task_id: str, poll_interval_ms: int | None) -> CallToolResult:
        deadline = time.monotonic() + self.timeout_s
        interval_s = (poll_interval_ms or 1000) / 1000
        while True:
            task = await session.send_request(GetTaskRequest(params=TaskRequestParams(task_id=task_id)), GetTaskResult)
            if self.on_update is not None:
                await self.on_update(task)
            if task.status is TaskStatus.COMPLETED:
                return CallToolResult.model_validate(task.result or {"content": []})
            if task.status is TaskStatus.FAILED:
                error = task.error or {}
                raise TaskFailed(int(error.get("code", -32603)), str(error.get("message", "")), error.get("data"))
            if task.status is TaskStatus.CANCELLED:
                raise TaskCancelled(f"task {task_id} was cancelled")
            if task.status is TaskStatus.INPUT_REQUIRED and task.input_requests:
                responses: dict[str, Any] = {}
                for key, raw in task.input_requests.items():
                    request = _INPUT_REQUEST.validate_python(raw)
                    answer = await session.dispatch_input_request(
                        ClientRequestContext(session=session, request_id=key), request
                    )
                    if isinstance(answer, ErrorData):
                        raise MCPError(answer.code, answer.message, answer.data)
                    responses[key] = answer.model_dump(by_alias=True, mode="json", exclude_none=True)
                    responses[key].pop("resultType", None)
                await session.send_request(
                    UpdateTaskRequest(params=UpdateTaskRequestParams(task_id=task_id, input_responses=responses)),
                    _Ack,
                )
                continue
            if time.monotonic() >= deadline:
                await self.cancel(session, task_id)
                raise TimeoutError(f"task {task_id} did not finish within {self.timeout_s:g}s; cancelled")
            await asyncio.sleep(max(0.05, (task.poll_interval_ms or interval_s * 1000) / 1000))
