"""The executor's side of a warm call: send one call to a warm worker and follow its event stream.

A warm worker (`runtime.serve`) answers `POST /v1/calls` with NDJSON events (`contract.PATH_CALLS`).
`WarmCall` sends the call, hands each progress and status event to the execution's channel as the
worker API would, and ends with the final event. Both executors use it: the embedded runner's pool
and, on Kubernetes, the gateway calling a warm Deployment's pods. Nothing here writes a store unless
the execution is a task.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, TypeGuard

import aiohttp

from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.runtime import contract
from mcp_tasks.tasks.tools import ToolSpec
from mcp_tasks.worker.channel import ChannelError, WorkerChannel
from mcp_tasks.worker.executions import Execution
from mcp_tasks.worker.tls import PeerTls
from mcp_tasks.worker.warm_auth import CallAuth, SessionUnavailable, WarmCallSigner, caller_of

logger = logging.getLogger("mcp_tasks.worker")

_MAX_EVENT_BYTES: Final = 80 * 1024 * 1024
"""Longest event line accepted from a worker, in bytes (a result up to the 64 MiB artifact cap, in JSON)."""


class WorkerLost(Exception):
    """The warm worker could not be reached, or its stream ended before a final event (it died mid-call).

    `delivered` is False when the call never reached the worker (connection refused, 429 full): it is
    then safe to send the same call to another worker.
    """

    def __init__(self, message: str, delivered: bool) -> None:
        super().__init__(message)
        self.delivered = delivered


@dataclass(frozen=True, slots=True)
class WarmTarget:
    """Where a call goes: the worker's base URL (`http://host:port`, `https://` with `tls`), and the worker
    API a call that asks for input reaches it through (`worker_url`, e.g. `http://127.0.0.1:N/v1/executions`),
    if any.
    """

    base_url: str
    worker_url: str | None = None
    tls: PeerTls | None = None

    def request_options(self) -> dict[str, Any]:
        """Extra aiohttp request arguments: the TLS verification of an `https` worker, else none."""
        return {} if self.tls is None else self.tls.request_options()


def call_body(tool: ToolSpec, execution: Execution, worker_url: str | None) -> JsonObject:
    """The `POST /v1/calls` body for `execution` (the fields `GET /input` gives a one-shot run)."""
    body: JsonObject = {
        "executionId": execution.execution_id,
        "tool": tool.name,
        "arguments": execution.arguments,
        "inputResponses": execution.pre_input_responses,
        "taskId": execution.task_id,
        "attempt": execution.attempt,
        "maxRunTimeSeconds": tool.execution.max_run_time_seconds
        if execution.task_id is not None
        else tool.execution.sync_timeout_seconds,
        "cancelGraceSeconds": tool.execution.cancel_grace_seconds,
    }
    if worker_url is not None:
        body["workerUrl"] = f"{worker_url}/{execution.execution_id}"
        body["workerToken"] = execution.token
    if execution.task_id is not None:
        unanswered = {
            key: {"method": spec.method, "params": spec.params}
            for key, spec in tool.manifest.input_before_task.items()
            if key not in execution.pre_input_responses
        }
        if unanswered:
            body["inputBeforeTask"] = unanswered
    return body


def auth_for(signer: WarmCallSigner, tool: str, execution: Execution) -> CallAuth:
    """The credentials of `execution`'s warm call on `tool`'s workers, for its principal (`execution.owner`)."""
    return CallAuth(signer, tool, execution.execution_id, caller_of(execution.owner))


OnEvent = Callable[[JsonObject], Awaitable[None]]


async def send_call(
    session: aiohttp.ClientSession, target: WarmTarget, body: JsonObject, on_event: OnEvent, auth: CallAuth
) -> JsonObject:
    """Send one call, with a credential minted for it by `auth` (on the session `auth`'s signer keeps with
    that worker, opened first if need be), and return its final event (`contract.EVENT_FINAL`); others go
    to `on_event`.

    Raises:
        WorkerLost: the worker is unreachable, refused the call (429 full, 401 another tool's or keyed
            otherwise, no session: `delivered` False), or its stream broke off.
    """
    data = json.dumps(body).encode()
    try:
        response = await auth.request(
            session, "POST", target.base_url, contract.PATH_CALLS, "call", data, target.request_options()
        )
        async with response:
            if response.status == 401:  # a configuration error, not a busy worker: say so loudly
                logger.warning(
                    "warm worker %s of %s refused the call's credential on a new session: this process and the "
                    "worker's executor hold different warm-call keys (MCPTASKS_WARM_CALL_KEY_FILE)",
                    target.base_url,
                    auth.tool,
                )
            if response.status != 200:
                text = (await response.text())[:500]
                raise WorkerLost(f"the warm worker answered {response.status}: {text}", delivered=False)
            buffer = bytearray()
            async for chunk in response.content.iter_any():
                buffer += chunk
                while (end := buffer.find(b"\n")) >= 0:
                    event = _decode(bytes(buffer[:end]))
                    del buffer[: end + 1]
                    if event is None:
                        continue
                    if event.get("event") in contract.EVENT_FINAL:
                        return event
                    await on_event(event)
                if len(buffer) > _MAX_EVENT_BYTES:
                    raise WorkerLost(f"the warm worker sent an event over {_MAX_EVENT_BYTES} bytes", delivered=True)
            raise WorkerLost("the warm worker's stream ended before the call's outcome", delivered=True)
    except SessionUnavailable as exc:
        if exc.refused:
            logger.warning("warm worker %s of %s: %s", target.base_url, auth.tool, exc)
        raise WorkerLost(f"the warm worker took no session: {exc}", delivered=False) from exc
    except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError, ConnectionRefusedError) as exc:
        raise WorkerLost(f"the warm worker cannot be reached: {exc}", delivered=False) from exc
    except (aiohttp.ClientError, asyncio.IncompleteReadError, ValueError) as exc:
        # The caller's message names the exception's kind only: the library's text (parser states, partial
        # payload sizes) means nothing to a tool's caller; the log keeps it.
        logger.warning("warm call to %s: connection lost mid-call: %s", target.base_url, exc)
        raise WorkerLost(
            f"its connection ended before the call's outcome ({type(exc).__name__})", delivered=True
        ) from exc


def _decode(line: bytes) -> JsonObject | None:
    text = line.strip()
    if not text:
        return None
    event = json.loads(text)
    return event if isinstance(event, dict) else None


async def cancel_call(session: aiohttp.ClientSession, target: WarmTarget, auth: CallAuth) -> None:
    """Ask the worker to stop a call (`DELETE /v1/calls/{id}`, with a fresh credential); a worker already
    gone (or that takes no session) is fine.
    """
    path = f"{contract.PATH_CALLS}/{auth.execution_id}"
    try:
        response = await auth.request(
            session, "DELETE", target.base_url, path, "cancel", options=target.request_options()
        )
        async with response:
            await response.read()
            if response.status == 401:
                logger.warning(
                    "cancel of warm call %s refused by the worker: credential not accepted", auth.execution_id
                )
    except (aiohttp.ClientError, OSError, SessionUnavailable) as exc:
        logger.info("cancel of warm call %s not delivered: %s", auth.execution_id, exc)


def channel_events(channel: WorkerChannel, execution: Execution) -> OnEvent:
    """An `on_event` that applies status and progress events to `execution` as the worker API does."""

    async def apply(event: JsonObject) -> None:
        kind = event.get("event")
        try:
            if kind == "status" and isinstance(event.get("statusMessage"), str):
                await channel.set_status_message(execution, str(event["statusMessage"]))
            elif kind == "progress" and _number(event.get("progress")):
                total = event.get("total")
                message = event.get("message")
                await channel.report_progress(
                    execution,
                    float(event["progress"]),
                    float(total) if _number(total) else None,
                    message if isinstance(message, str) else None,
                )
        except ChannelError as exc:
            logger.info("warm call %s: %s event not applied: %s", execution.execution_id, kind, exc)

    return apply


def _number(value: object) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


async def apply_final(channel: WorkerChannel, execution: Execution, tool: ToolSpec, final: JsonObject) -> None:
    """Record a `result` or `error` final event through the channel, as `POST /result` would.

    A result the channel refuses as malformed or off the tool's `outputSchema` (400) becomes an
    `isError` result saying why, as the one-shot runtime does.
    """
    body = {key: value for key, value in final.items() if key != "event"}
    try:
        await channel.finish(execution, body)
    except ChannelError as exc:
        if exc.status != 400:
            raise
        text = f"The tool returned an invalid result: {exc}"
        await channel.finish(execution, {"result": {"content": [{"type": "text", "text": text}], "isError": True}})
