"""A tool the server itself runs as a 2025-11-25 task, driven by the bridge and shown as one of our tasks.

A tool that lists `execution.taskSupport` `required` or `optional` on a 2025-11-25 server whose capabilities
include `tasks.requests.tools.call` (MCP 2025-11-25 basic/utilities/tasks, "Tool-Level Negotiation") is
called with `tools/call` + `task: {ttl}`; the server answers a `CreateTaskResult`, and the bridge follows
that task to its end:

- `tasks/get` every `pollInterval` the server suggests (woken early by its `notifications/tasks/status`),
  each new `statusMessage` (or status) → our task's progress and `statusMessage`;
- `input_required` → `tasks/result` is called at once (the spec's SHOULD), over which the server delivers
  the requests it made for the task (`elicitation/create`, `sampling/createMessage`): they reach the
  connection's ordinary callbacks and become our input rounds (`mapping.ServerRequests`);
- a terminal status → the answer of `tasks/result`: a `CallToolResult` is our result verbatim (less the
  server's related-task `_meta`, which names its task id), a JSON-RPC error fails our task with it; a task
  the server failed or cancelled without either fails ours with its `statusMessage`;
- our cancel (the call abandoned) → the server's `tasks/cancel`, then its own `tasks/get`, whose answer is
  logged on the bridge's stderr (the runner keeps it), within `CANCEL_TIMEOUT_S`.

The server's task id stays inside the bridge: our client sees only our task. Who calls it: `call.call_tool`.

SDK gaps (official `mcp` 2.3.0): it types the 2025-11-25 task messages (`TaskMetadata`, `CreateTaskResult`,
`GetTaskRequest`, ...) but offers no client API for them, and it checks every 2025-11-25 `tools/call`
answer as a `CallToolResult`, so a `CreateTaskResult` cannot pass `send_request`. The task-augmented
`tools/call` alone therefore goes through the session's own dispatcher (`_send_task_call`, its private
attributes); `tasks/get`, `tasks/result` and `tasks/cancel` go through the public `send_request` with the
SDK's models; `notifications/tasks/status`, which the SDK drops at 2025-11-25, reaches us through its
public `ClientExtension` notification binding (`status_extension`).
"""

from __future__ import annotations

import contextlib
import logging
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import anyio
import mcp_types as types
from mcp.client.extension import ClientExtension, NotificationBinding
from mcp.client.session import ClientSession
from mcp.shared.dispatcher import CallOptions, ProgressFnT
from mcp.shared.exceptions import MCPError
from pydantic import RootModel, ValidationError

from mcp_tasks.bridge.mapping import without_related_task
from mcp_tasks.runtime import ProtocolFailure

logger = logging.getLogger("mcp_tasks.bridge")

Json = dict[str, Any]
TaskSupport = Literal["optional", "required"]

TASKS_REVISION: Final = "2025-11-25"
"""The only revision whose servers run tools as tasks of their own (2026-07-28 moved tasks to an extension)."""
SERVER_TASK_TTL_MS: Final = 86_400_000
"""The `ttl` asked of the server for its task, in ms (24 h): the bridge fetches the result as soon as the task
ends, so the server need keep it only that long; a day outlasts any run a default `maxRunTimeSeconds` allows.
The server may grant less (server-everything grants 300 000)."""
DEFAULT_POLL_INTERVAL_MS: Final = 1000
"""`tasks/get` interval when the server suggests none, in ms."""
MIN_POLL_INTERVAL_MS: Final = 100
"""Shortest `tasks/get` interval, in ms, whatever the server suggests (a `pollInterval` of 0 is no flood)."""
MAX_POLL_INTERVAL_MS: Final = 60_000
"""Longest wait between two `tasks/get`, in ms (bounds every wait; status notifications wake it earlier)."""
CANCEL_TIMEOUT_S: Final = 1.5
"""Longest wait for the server's answers to `tasks/cancel` and the `tasks/get` after it, in seconds: below
the smallest useful `cancelGraceSeconds`, after which a one-shot bridge is killed."""
MAX_TRACKED_STATUSES: Final = 1000
"""Task statuses kept per connection for tasks no call follows (yet): a notification can arrive before the
`CreateTaskResult` it belongs to; older ones are dropped."""
STATUS_EXTENSION: Final = "io.mcptasks/server-task-status"
"""The identifier of the (claim-less) client extension that binds `notifications/tasks/status`; the SDK
advertises it in the client's capabilities, so only connections of task-running tools declare it."""
TERMINAL: Final = frozenset({"completed", "failed", "cancelled"})
"""The 2025-11-25 task statuses after which nothing changes."""

_Raw = RootModel[dict[str, Any]]


def task_support(value: str | None) -> TaskSupport | None:
    """The `ENV_BRIDGE_TASK_SUPPORT` value as a task support worth acting on (`forbidden`, absent, other: None)."""
    if value == "required":
        return "required"
    if value == "optional":
        return "optional"
    return None


def augmented(
    support: TaskSupport | None, protocol_version: str | None, capabilities: types.ServerCapabilities | None
) -> bool:
    """Tell whether a call is sent as a task: the tool supports it (`required` or `optional`), the connection
    speaks 2025-11-25 and the server declared `tasks.requests.tools.call`.

    `optional` runs as a task too (our choice): the server designed the tool for it, its task gives status
    messages and a cancel it answers (its final state) where a plain call has only advisory progress and a
    fire-and-forget `notifications/cancelled`. Without the capability the spec forbids the augmentation
    (2025-11-25 tasks, "Tool-Level Negotiation": "clients MUST NOT attempt task-augmentation"), so the
    call goes plain and a `required` tool's server answers it as it will.
    """
    if support is None or protocol_version != TASKS_REVISION or capabilities is None:
        return False
    tasks = capabilities.tasks
    return (
        tasks is not None
        and tasks.requests is not None
        and tasks.requests.tools is not None
        and (tasks.requests.tools.call is not None)
    )


def poll_interval_s(task: types.Task) -> float:
    """Seconds until the next `tasks/get`: the server's `pollInterval`, clamped to
    [`MIN_POLL_INTERVAL_MS`, `MAX_POLL_INTERVAL_MS`], `DEFAULT_POLL_INTERVAL_MS` when it suggests none.
    """
    interval = DEFAULT_POLL_INTERVAL_MS if task.poll_interval is None else task.poll_interval
    return min(max(interval, MIN_POLL_INTERVAL_MS), MAX_POLL_INTERVAL_MS) / 1000


def wants_result(task: types.Task) -> bool:
    """Whether `tasks/result` is due: the task ended, or waits for input the server delivers over it."""
    return task.status == "input_required" or task.status in TERMINAL


class StatusReports:
    """The server task's states → our progress reports: one report per change of status or `statusMessage`.

    Each report is `(n, None, message)`: `n` counts the changes (progress must grow), `message` is the
    server's `statusMessage`, or its status when it gives none.
    """

    def __init__(self) -> None:
        self._last: tuple[str, str | None] | None = None
        self._count = 0

    def report(self, task: types.Task) -> tuple[float, float | None, str] | None:
        """The report `task` makes, or None when it shows nothing new."""
        state = (task.status, task.status_message)
        if state == self._last:
            return None
        self._last = state
        self._count += 1
        return float(self._count), None, task.status_message or f"the server's task is {task.status}"


def failure(task: types.Task, error: types.ErrorData | None) -> ProtocolFailure:
    """Our failure for a server task that ended with no `CallToolResult` (failed, or cancelled by the server).

    The error `tasks/result` answered keeps its code and data; the message names the server task's end
    and its `statusMessage` (the server's words on why), not its task id.
    """
    why = f": {task.status_message}" if task.status_message else ""
    message = f"the MCP server's task for this call ended {task.status}{why}"
    if error is None:
        return ProtocolFailure(message)
    return ProtocolFailure(f"{message} ({error.message})", error.code, error.data)


class TaskStatuses:
    """`notifications/tasks/status` of one connection, kept per server task id and waited on by the calls
    that follow those tasks (a warm connection carries several). Bounded: `MAX_TRACKED_STATUSES`.
    """

    def __init__(self) -> None:
        self._latest: OrderedDict[str, types.Task] = OrderedDict()
        self._changed: dict[str, anyio.Event] = {}

    async def notified(self, params: types.TaskStatusNotificationParams) -> None:
        """The SDK's binding handler: keep the task's latest status and wake whoever follows it."""
        task = types.Task.model_validate(params.model_dump(by_alias=True, exclude={"meta"}))
        self._latest[task.task_id] = task
        self._latest.move_to_end(task.task_id)
        while len(self._latest) > MAX_TRACKED_STATUSES:
            self._latest.popitem(last=False)
        event = self._changed.get(task.task_id)
        if event is not None:
            event.set()

    def latest(self, task_id: str) -> types.Task | None:
        """The last status notified for `task_id`, if any."""
        return self._latest.get(task_id)

    def follow(self, task_id: str) -> anyio.Event:
        """A fresh event set by the next notification for `task_id`."""
        event = self._changed[task_id] = anyio.Event()
        return event

    def forget(self, task_id: str) -> None:
        """Drop what is kept for `task_id` (its call ended)."""
        self._changed.pop(task_id, None)
        self._latest.pop(task_id, None)


class _StatusExtension(ClientExtension):
    identifier = STATUS_EXTENSION

    def __init__(self, statuses: TaskStatuses) -> None:
        self._statuses = statuses

    def notifications(self) -> Sequence[NotificationBinding[Any]]:
        return [
            NotificationBinding(
                method="notifications/tasks/status",
                params_type=types.TaskStatusNotificationParams,
                handler=self._statuses.notified,
            )
        ]


@dataclass(frozen=True, slots=True)
class TaskMode:
    """The calls of one tool over one connection as server tasks: the tool's support, the connection's statuses."""

    support: TaskSupport
    statuses: TaskStatuses = field(default_factory=TaskStatuses)

    @property
    def extensions(self) -> tuple[ClientExtension, ...]:
        """The connection's client extensions: the binding of `notifications/tasks/status` to `statuses`."""
        return (_StatusExtension(self.statuses),)


def task_mode(value: str | None) -> TaskMode | None:
    """The `ENV_BRIDGE_TASK_SUPPORT` value as a `TaskMode` (`forbidden`, absent or other: None, plain calls)."""
    support = task_support(value)
    return None if support is None else TaskMode(support)


async def _send_task_call(
    session: ClientSession, name: str, arguments: Json, progress: ProgressFnT, ttl_ms: int
) -> Json:
    """Send `tools/call` with `task: {ttl}` and return the raw answer (a `CreateTaskResult`, or a
    `CallToolResult` from a server that ran it plainly).

    Through the session's dispatcher, as `ClientSession.send_request` does it (same stamp, ids, progress
    token, cancellation), less its check of the answer as a `CallToolResult` (see the module docstring).

    Raises:
        MCPError: the server answered an error, or the connection closed.
    """
    request = types.CallToolRequest(
        params=types.CallToolRequestParams(name=name, arguments=arguments, task=types.TaskMetadata(ttl=ttl_ms))
    )
    data = request.model_dump(by_alias=True, mode="json", exclude_none=True)
    opts: CallOptions = {"on_progress": progress}
    session._stamp(data, opts)  # the SDK gap (module docstring): no public send without the check
    return await session._dispatcher.send_raw_request("tools/call", data.get("params"), opts)


async def _get(session: ClientSession, task_id: str) -> types.Task:
    """`tasks/get`.

    Raises:
        MCPError: the server answered an error (e.g. -32602: it no longer knows the task), or the
            connection closed.
        ValidationError: the answer is not a `Task`.
    """
    request = types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id))
    return types.Task.model_validate((await session.send_request(request, _Raw)).root)


async def _result(session: ClientSession, task_id: str) -> Json | types.ErrorData:
    """`tasks/result`: the `CallToolResult` as sent, or the JSON-RPC error the server answered (its
    connection closing is raised: `MCPError` `CONNECTION_CLOSED`).
    """
    request = types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=task_id))
    try:
        return (await session.send_request(request, _Raw)).root
    except MCPError as exc:
        if exc.error.code == types.CONNECTION_CLOSED:
            raise
        return exc.error


async def _cancel(session: ClientSession, task_id: str) -> None:
    """`tasks/cancel`, then the server's own `tasks/get`, the state it shows logged (proof it got the cancel).

    A refusal (the task had ended) or no answer within `CANCEL_TIMEOUT_S` is logged too; nothing is raised.
    """
    with anyio.move_on_after(CANCEL_TIMEOUT_S) as scope:
        try:
            request = types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task_id))
            await session.send_request(request, _Raw)
            task = await _get(session, task_id)
        except (MCPError, ValidationError) as exc:
            logger.warning("the server refused to cancel its task for this call: %s", exc)
            return
        logger.warning("the server's task for this call is %s: %s", task.status, task.status_message or "-")
    if scope.cancelled_caught:
        logger.warning("the server did not answer tasks/cancel within %s s", CANCEL_TIMEOUT_S)


async def call_as_task(
    session: ClientSession,
    name: str,
    arguments: Json,
    progress: ProgressFnT,
    statuses: TaskStatuses,
    ttl_ms: int = SERVER_TASK_TTL_MS,
) -> Json:
    """Run `name` as the server's task and return its `CallToolResult` (see the module docstring).

    Args:
        session: the connection's session (2025-11-25, `augmented` held).
        name: the server's name of the tool.
        arguments: the call's arguments, as the client gave them.
        progress: receives `(n, None, statusMessage)` per change of the server task's state
            (`StatusReports`), and any `notifications/progress` that answers the call itself.
        statuses: the connection's `notifications/tasks/status`.
        ttl_ms: the `ttl` asked for the server's task.

    Raises:
        MCPError: the server answered the call or a `tasks/get` with an error, or the connection closed.
        ProtocolFailure: the server's task ended failed or cancelled with no `CallToolResult`, or an
            answer was not of its shape (code -32603).
        Cancelled (anyio): the call was abandoned; the server's task was cancelled first (`_cancel`).
    """
    raw = await _send_task_call(session, name, arguments, progress, ttl_ms)
    if "task" not in raw and isinstance(raw.get("content"), list):  # run as a plain call, as `optional` may be
        return without_related_task(raw)
    try:
        task = types.CreateTaskResult.model_validate(raw).task
    except ValidationError as exc:
        raise ProtocolFailure(f"the MCP server's answer to a task-augmented tools/call is not valid: {exc}") from exc
    try:
        return await _follow(session, task, progress, statuses)
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True):
            await _cancel(session, task.task_id)
        raise
    finally:
        statuses.forget(task.task_id)


async def _follow(session: ClientSession, task: types.Task, progress: ProgressFnT, statuses: TaskStatuses) -> Json:
    """Follow the server's task until `tasks/result` answers (sent once `wants_result`), reporting its states.

    Raises:
        as `call_as_task`.
    """
    reports = StatusReports()
    answer: Json | types.ErrorData | None = None
    error: Exception | None = None
    answered = anyio.Event()

    async def fetch() -> None:
        nonlocal answer, error
        try:
            answer = await _result(session, task.task_id)
        except MCPError as exc:
            error = exc
        answered.set()

    async def until(event: anyio.Event, scope: anyio.CancelScope) -> None:
        await event.wait()
        scope.cancel()

    async with anyio.create_task_group() as group:
        fetching = False
        # Errors are kept, not raised, inside the group: it would wrap them in an exception group.
        try:
            while not answered.is_set():
                changed = statuses.follow(task.task_id)
                notified = statuses.latest(task.task_id)
                if notified is not None and notified.last_updated_at >= task.last_updated_at:
                    task = notified
                made = reports.report(task)
                if made is not None:
                    await progress(*made)
                if wants_result(task) and not fetching:
                    fetching = True
                    group.start_soon(fetch, name="tasks/result")
                with anyio.move_on_after(poll_interval_s(task)):
                    async with anyio.create_task_group() as wait:
                        wait.start_soon(until, changed, wait.cancel_scope)
                        wait.start_soon(until, answered, wait.cancel_scope)
                if not answered.is_set() and not changed.is_set():  # no news within pollInterval: ask
                    task = await _get(session, task.task_id)
        except (MCPError, ValidationError) as exc:
            error = exc
        group.cancel_scope.cancel()
    if isinstance(error, ValidationError):
        raise ProtocolFailure(f"the MCP server's answer to tasks/get is not a Task: {error}") from error
    if error is not None:
        raise error
    if isinstance(answer, dict):
        if isinstance(answer.get("content"), list):
            return without_related_task(answer)
        raise ProtocolFailure("the MCP server's answer to tasks/result is not a CallToolResult")
    if task.status not in TERMINAL:
        with contextlib.suppress(MCPError, ValidationError):  # the error `tasks/result` answered says enough
            task = await _get(session, task.task_id)
    raise failure(task, answer)
