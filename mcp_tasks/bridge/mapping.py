"""The mapping between an MCP server's messages during a call and the task that call is (docs/mcp-servers.md).

- the server's `elicitation/create`, `sampling/createMessage`, `roots/list` → the task's `inputRequests`
  (`ToolContext.ask`: the task goes `input_required`), the client's answer through `tasks/update` → the
  response to the waiting server request. A kind the calling client did not declare is never put: the
  worker API refuses it (`ClientLacksCapability`) and the server gets a JSON-RPC error saying so;
- `notifications/progress` → the task's progress and `statusMessage` (`ToolContext.progress`), coalesced:
  a flood of notifications costs one worker-API call at a time, the latest value wins;
- `notifications/message` → log lines on the bridge's stderr (the runner keeps a bounded tail), bounded;
- a transport-level error (a malformed line on stdout, an unknown message) → one warning line, bounded.

A request the server made for one of its own 2025-11-25 tasks (`bridge/server_tasks.py`) carries that task's
id in `_meta` (`RELATED_TASK_META`): it is taken out before the request is put (`without_related_task`), so
our client never sees the server's task id.

The `ToolContext` is blocking (standard library HTTP), so every call into it runs in a worker thread.
"""

from __future__ import annotations

import itertools
import logging
import sys
from collections.abc import Callable
from typing import Any, Final, TypeVar

import anyio
import anyio.lowlevel
import anyio.to_thread
import mcp_types as types
from mcp.client.extension import ClientExtension
from pydantic import BaseModel, ValidationError

from mcp_tasks.bridge.target import Handlers
from mcp_tasks.runtime import ClientLacksCapability, InputRequestFailed, ToolContext, WorkerApiError
from mcp_tasks.runtime.tool import CallCancelled

logger = logging.getLogger("mcp_tasks.bridge")

MAX_LOG_LINES: Final = 1000
"""Server log messages (and transport warnings) written per connection; later ones are counted, not written."""
MAX_LOG_LINE_CHARS: Final = 2000
"""Longest server log line written, in characters."""
NO_CALL: Final = "no call of this connection is waiting for input"
RELATED_TASK_META: Final = "io.modelcontextprotocol/related-task"
"""The `_meta` key naming the server's task a message belongs to (MCP 2025-11-25 tasks, "Associating
Task-Related Messages")."""

Model = TypeVar("Model", bound=BaseModel)
Resolve = Callable[[], "ToolContext | str"]
"""Which call a server request belongs to: its `ToolContext`, or why none can take it (a message)."""


def without_related_task(message: dict[str, Any]) -> dict[str, Any]:
    """`message` (request params or a result, as JSON) without `_meta`'s `RELATED_TASK_META`; `_meta` itself
    goes when nothing else is left in it. The input is not changed.
    """
    meta = message.get("_meta")
    if not isinstance(meta, dict) or RELATED_TASK_META not in meta:
        return message
    kept = {key: value for key, value in meta.items() if key != RELATED_TASK_META}
    stripped = {key: value for key, value in message.items() if key != "_meta"}
    return {**stripped, "_meta": kept} if kept else stripped


def _error(message: str, code: int = types.INTERNAL_ERROR) -> types.ErrorData:
    return types.ErrorData(code=code, message=message)


class ServerRequests:
    """The client side of the server's requests: each one put to the calling client as an input request.

    Args:
        resolve: the call a request belongs to. A per-call connection has one; a warm connection
            shared by concurrent calls can tell only when one call is in flight (stdio carries no
            relation between a server request and a client request).
    """

    def __init__(self, resolve: Resolve) -> None:
        self._resolve = resolve
        self._keys = itertools.count(1)

    async def _put(self, method: str, params: dict[str, Any], parse: Callable[[Any], Model]) -> Model | types.ErrorData:
        """Put one request to the calling client and wait for its answer (the task is `input_required` meanwhile).

        Returns the parsed answer, or the JSON-RPC error the server gets: -32601 when the client did not
        declare the capability, -32603 when the client's answer was an error or not of the right shape.
        """
        ctx = self._resolve()
        if isinstance(ctx, str):
            return _error(f"mcp-tasks cannot put {method} to a client: {ctx}")
        key = f"{method.partition('/')[0]}-{next(self._keys)}"
        request = {key: {"method": method, "params": without_related_task(params)}}
        try:
            answers = await anyio.to_thread.run_sync(ctx.ask, request, abandon_on_cancel=True)
        except ClientLacksCapability as exc:
            return _error(f"mcp-tasks: the client that called this tool cannot answer {method}: {exc}", -32601)
        except (InputRequestFailed, WorkerApiError) as exc:
            return _error(f"mcp-tasks could not put {method} to the calling client: {exc}")
        try:
            return parse(answers[key])
        except (ValidationError, KeyError) as exc:
            return _error(f"the calling client's answer to {method} is not a valid result: {exc}")

    async def sampling(
        self, context: Any, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult | types.CreateMessageResultWithTools | types.ErrorData:
        """`sampling/createMessage` → an input request; the client's `CreateMessageResult` back to the server."""

        def parse(answer: Any) -> types.CreateMessageResult | types.CreateMessageResultWithTools:
            try:
                return types.CreateMessageResult.model_validate(answer)
            except ValidationError:
                return types.CreateMessageResultWithTools.model_validate(answer)

        return await self._put(
            "sampling/createMessage", params.model_dump(by_alias=True, mode="json", exclude_none=True), parse
        )

    async def elicitation(
        self, context: Any, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        """`elicitation/create` (form or URL mode) → an input request; the `ElicitResult` back."""
        return await self._put(
            "elicitation/create",
            params.model_dump(by_alias=True, mode="json", exclude_none=True),
            types.ElicitResult.model_validate,
        )

    async def list_roots(self, context: Any) -> types.ListRootsResult | types.ErrorData:
        """`roots/list` → an input request; the client's roots back."""
        return await self._put("roots/list", {}, types.ListRootsResult.model_validate)


class Progress:
    """`notifications/progress` of one call → the task's progress, coalesced.

    `__call__` (the SDK's progress callback) only records the latest value; `run` posts it, one
    worker-API call at a time, so a server that floods notifications cannot queue work or stall the
    connection. Run `run` in a task group for the call's life; cancel it when the call ends.
    """

    def __init__(self, ctx: ToolContext) -> None:
        self._ctx = ctx
        self._latest: tuple[float, float | None, str | None] | None = None
        self._changed = anyio.Event()

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self._latest = (progress, total, message)
        self._changed.set()

    async def run(self) -> None:
        """Post the latest progress whenever it changed, until cancelled."""
        while True:
            await self._changed.wait()
            self._changed = anyio.Event()
            latest, self._latest = self._latest, None
            if latest is None:
                continue
            try:
                await anyio.to_thread.run_sync(self._ctx.progress, *latest, abandon_on_cancel=True)
            except WorkerApiError as exc:  # progress is advisory: a refused report does not end the call
                logger.warning("progress not reported: %s", exc)
            except CallCancelled:  # a warm call that was cancelled meanwhile: its watcher ends the call
                return


class ServerMessages:
    """`notifications/message` and transport errors of one connection → bounded lines on stderr.

    `on_tools_changed` is called for `notifications/tools/list_changed` (discovery lists again).
    """

    def __init__(self, server: str, on_tools_changed: Callable[[], None] | None = None) -> None:
        self._server = server
        self._lines = 0
        self._dropped = 0
        self._on_tools_changed = on_tools_changed

    def _write(self, line: str) -> None:
        if self._lines >= MAX_LOG_LINES:
            self._dropped += 1
            return
        self._lines += 1
        if len(line) > MAX_LOG_LINE_CHARS:
            line = line[: MAX_LOG_LINE_CHARS - 1] + "…"
        sys.stderr.write(line.replace("\n", "\\n") + "\n")
        if self._lines == MAX_LOG_LINES:
            sys.stderr.write(f"[{self._server}] further log lines of this server are dropped\n")
        sys.stderr.flush()

    async def logging(self, params: types.LoggingMessageNotificationParams) -> None:
        """One server log message as `[server] level logger: data`."""
        where = f" {params.logger}" if params.logger else ""
        self._write(f"[{self._server}] {params.level}{where}: {params.data}")

    async def message(self, message: types.ServerNotification | Exception) -> None:
        """Every other notification, and transport errors (the SDK hands both here)."""
        if isinstance(message, Exception):
            self._write(f"[{self._server}] ignored a malformed message from the server: {type(message).__name__}")
        elif isinstance(message, types.ToolListChangedNotification) and self._on_tools_changed is not None:
            self._on_tools_changed()
        await anyio.lowlevel.checkpoint()

    @property
    def dropped(self) -> int:
        """Log lines not written because of the bound."""
        return self._dropped


def connection_handlers(resolve: Resolve, server: str, extensions: tuple[ClientExtension, ...] = ()) -> Handlers:
    """The client callbacks of one connection to `server` (the mapping table, docs/mcp-servers.md §3): its
    requests put to the call `resolve` names, its log and other messages written as `ServerMessages` does,
    and `extensions` (e.g. the binding of a server task's `notifications/tasks/status`).
    """
    requests = ServerRequests(resolve)
    messages = ServerMessages(server)
    return Handlers(
        requests.sampling, requests.elicitation, requests.list_roots, messages.logging, messages.message, extensions
    )
