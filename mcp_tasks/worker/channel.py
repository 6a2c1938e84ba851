"""`WorkerChannel`: what the worker API does for a tool process, against the task store.

Implements the runtime contract's semantics (`runtime.contract`): status messages, input requests
with server-minted keys, hand-out of answers written by `tasks/update`, and the final result or
error, sized against the inline cap (larger results become artifacts). Synchronous runs use the same
calls but settle a future instead of a task record; one that asks for input is promoted (`Promote`)
to a hidden task owned by its caller, so the caller can answer in multi-round-trip retries (SEP-2322).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import Final

from mcp_types import CallToolResult
from pydantic import ValidationError

from mcp_tasks.protocol import constants
from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.tasks import arguments, results, transitions
from mcp_tasks.tasks.errors import (
    IllegalTransition,
    InputCapabilityMissing,
    StoreUnavailable,
    TaskNotFound,
    VersionConflict,
)
from mcp_tasks.tasks.interfaces import ArtifactStore, Clock, TaskStore, Writer, transact
from mcp_tasks.tasks.record import TaskRecord
from mcp_tasks.worker.executions import AskedForInput, Execution, Finished

logger = logging.getLogger("mcp_tasks.worker")

_KEY: Final = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")

Transition = Callable[[TaskRecord, datetime], TaskRecord]

Promote = Callable[[Execution, list[tuple[str, JsonObject]], str | None], Awaitable[list[str]]]
"""Turn a synchronous execution that asks for input into a hidden task parked on these requests
(`(suggested key, {method, params})`, and the worker's round id or None); returns the minted keys. Raises
`InputCapabilityMissing` (nothing is created) when the caller did not declare a capability a request needs."""


def recording(outcome: Finished) -> Transition:
    """The terminal transition that records a tool's final outcome: `completed` with its result, else
    `failed` with its JSON-RPC error and status message.
    """
    result = outcome.result
    if result is not None:
        return lambda record, now: transitions.complete(record, result, now)
    error = outcome.error or {}
    message = outcome.status_message or str(error.get("message"))
    return lambda record, now: transitions.fail(record, error, message, now)


class ChannelError(Exception):
    """A worker-API call that cannot be honoured; `status` is the HTTP status to answer.

    `capability` names the client capability a refused input request needs (412 only).
    """

    def __init__(self, status: int, message: str, capability: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.capability = capability


def _validate_input_requests(requests: Mapping[str, object]) -> list[tuple[str, JsonObject]]:
    checked: list[tuple[str, JsonObject]] = []
    for key, request in requests.items():
        if not _KEY.match(key):
            raise ChannelError(400, f"input request key {key!r} must match [A-Za-z0-9_.-]{{1,64}}")
        if not isinstance(request, dict) or request.get("method") not in constants.INPUT_METHOD_CAPABILITY:
            raise ChannelError(
                400,
                f"inputRequests[{key!r}] must be {{method, params}} with method one of "
                f"{sorted(constants.INPUT_METHOD_CAPABILITY)}",
            )
        params = request.get("params", {})
        if not isinstance(params, dict):
            raise ChannelError(400, f"inputRequests[{key!r}].params must be an object")
        checked.append((key, {"method": request["method"], "params": params}))
    return checked


def _superseded(execution: Execution) -> ChannelError:
    return ChannelError(409, f"this run (attempt {execution.attempt}) was superseded: a later run of the task owns it")


def _fenced(execution: Execution, record: TaskRecord) -> None:
    """Refuse a write of a run a later run superseded (`TaskRecord.superseded`): it changes nothing.

    Raises:
        ChannelError: 409, the run is stale.
    """
    if record.superseded(execution.attempt):
        raise _superseded(execution)


class WorkerChannel:
    """The worker API's operations.

    Args:
        store: the task store.
        artifacts: where results over `inline_result_max_bytes` go.
        clock: UTC time source.
        inline_result_max_bytes: largest result kept inline in the record and the response, in bytes.
        promote: how a synchronous run that asks for input becomes a hidden task; without it (the
            operator, whose runs are all tasks) such a run is refused (409).
    """

    def __init__(
        self,
        store: TaskStore,
        artifacts: ArtifactStore,
        clock: Clock,
        inline_result_max_bytes: int,
        promote: Promote | None = None,
    ) -> None:
        self.store = store
        self.artifacts = artifacts
        self.clock = clock
        self.inline_result_max_bytes = inline_result_max_bytes
        self.promote = promote

    async def arguments(self, execution: Execution) -> JsonObject:
        """The run's arguments: inline, or read back from its task's artifact (`tasks.arguments.load`).

        Raises:
            ChannelError: 410 when the artifact is missing or does not match its reference (the run
                cannot have its arguments).
            OSError, StoreUnavailable: the artifact store cannot be read now (the worker API answers 503).
        """
        try:
            return await arguments.load(execution.task_id, execution.arguments, execution.arguments_ref, self.artifacts)
        except arguments.ArgumentsUnavailable as exc:
            raise ChannelError(410, str(exc)) from exc

    async def _change(self, execution: Execution, change: Transition) -> TaskRecord:
        """Apply `change` to the run's task: read, change, compare-and-swap; a conflict is retried at once.

        The usual conflict here is the executor's own bookkeeping of the same run (the lease, the process
        it records) landing between the read and the write, not a crowd of writers: so the first retry
        does not wait; later ones back off as `transact` does.
        """
        assert execution.task_id is not None  # callers check synchronous runs first
        task_id = execution.task_id

        def fenced(record: TaskRecord, now: datetime) -> TaskRecord:
            _fenced(execution, record)
            return change(record, now)

        try:
            try:
                current = await self.store.get(task_id)
                updated = fenced(current, self.clock())
                if updated is current:
                    return current
                return await self.store.compare_and_swap(updated, Writer.EXECUTOR)
            except VersionConflict:
                record, _ = await transact(
                    self.store, task_id, lambda r: (fenced(r, self.clock()), None), Writer.EXECUTOR
                )
        except IllegalTransition as exc:
            raise ChannelError(409, f"the task already finished: {exc}") from exc
        except TaskNotFound as exc:
            raise ChannelError(409, "the task no longer exists") from exc
        return record

    async def set_status_message(self, execution: Execution, message: str) -> None:
        """Set `statusMessage` (bounded to 1,000 characters)."""
        if execution.task_id is None:
            return
        await self._change(execution, lambda r, now: transitions.set_status_message(r, message[:1000], now))

    async def report_progress(
        self, execution: Execution, progress: float, total: float | None, message: str | None
    ) -> None:
        """A numeric progress report: the synchronous caller's sink hears it; a task records it
        (`statusMessage`, and `progress` for a hidden task's waiting caller).
        """
        if execution.task_id is None:
            if execution.on_progress is not None:
                report: JsonObject = {"progress": progress}
                if total is not None:
                    report["total"] = total
                if message is not None:
                    report["message"] = message[:1000]
                await execution.on_progress(report)
            return
        await self._change(
            execution, lambda r, now: transitions.report_progress(r, progress, total, message and message[:1000], now)
        )

    async def ask(
        self, execution: Execution, requests: Mapping[str, object], round_id: str | None = None
    ) -> dict[str, str]:
        """Issue input requests; return suggested key → minted key.

        A synchronous run's first ask promotes it to a hidden task (`Promote`) parked on these requests,
        so its caller gets them as an `InputRequiredResult`; a run whose caller can take no input rounds
        is refused. `round_id` (the worker's, per round) makes a retry of the latest round get its keys
        again instead of new ones (`transitions.add_input_requests`).

        Raises:
            ChannelError: 400 for malformed requests; 409 for a run that cannot wait for input or a finished
                task; 412 when the client that created the task (or made the call) did not declare the
                capability a request needs (MCP 2026-07-28: no input request of an undeclared kind; nothing
                is issued then, and `capability` names it).
        """
        checked = _validate_input_requests(requests)
        try:
            if execution.task_id is None:
                if execution.client_capabilities is None or self.promote is None:
                    execution.settle(AskedForInput())
                    raise ChannelError(409, "this call cannot wait for input (its client has no input rounds)")
                minted = await self.promote(execution, checked, round_id)
            else:
                minted = []

                def change(record: TaskRecord) -> tuple[TaskRecord, None]:
                    _fenced(execution, record)
                    updated, keys = transitions.add_input_requests(record, checked, self.clock(), round_id)
                    minted[:] = keys
                    return updated, None

                await transact(self.store, execution.task_id, change, Writer.EXECUTOR)
        except IllegalTransition as exc:
            raise ChannelError(409, f"the task already finished: {exc}") from exc
        except InputCapabilityMissing as exc:
            raise ChannelError(412, str(exc), capability=exc.capability) from exc
        return {suggested: key for (suggested, _), key in zip(checked, minted, strict=True)}

    async def take_responses(self, execution: Execution, keys: list[str], wait_s: float) -> JsonObject:
        """Hand out answered responses for `keys`, waiting up to `wait_s` seconds for at least one.

        Raises:
            ChannelError: 409 when the run is synchronous, the task finished, or a later run superseded
                this one (it takes nothing).
        """
        if execution.task_id is None:
            raise ChannelError(409, "a synchronous run has no input responses")
        task_id = execution.task_id
        deadline = self.clock().timestamp() + wait_s

        def take(record: TaskRecord) -> tuple[TaskRecord, JsonObject]:
            _fenced(execution, record)  # a stale run never consumes its successor's answers
            return transitions.take_input_responses(record, keys)

        while True:
            try:
                record, taken = await transact(self.store, task_id, take, Writer.EXECUTOR)
            except TaskNotFound as exc:
                raise ChannelError(409, "the task no longer exists") from exc
            if taken:
                return taken
            if record.status.is_terminal:
                raise ChannelError(409, f"the task is {record.status}")
            remaining = deadline - self.clock().timestamp()
            if remaining <= 0:
                return {}
            await self.store.wait_for_change(remaining, task_id)

    async def finish(self, execution: Execution, body: Mapping[str, object]) -> None:
        """Record the tool's final `{result}` or `{error, statusMessage}`.

        Raises:
            ChannelError: 400 for a malformed body, 409 when the execution already finished or a later
                run superseded it (nothing is recorded).
            StoreUnavailable: the task store cannot write; the outcome is kept on `execution.unrecorded`
                (the tool is answered 503 and retries).
        """
        outcome = self._parse_outcome(body)
        problems = (
            [] if outcome.result is None or execution.tool is None else execution.tool.result_errors(outcome.result)
        )
        if problems:
            raise ChannelError(400, "result does not match the tool's outputSchema: " + "; ".join(problems))
        if execution.task_id is None:
            if outcome.result is not None and len(results.encode(outcome.result)) > self.inline_result_max_bytes:
                outcome = Finished(
                    result=results.error_result(
                        "The result is too large for a synchronous call; call this tool with the tasks "
                        "extension to receive it as a resource link"
                    )
                )
            if not execution.settle(outcome):
                raise ChannelError(409, "the execution already finished")
            return
        task_id = execution.task_id
        if outcome.result is not None:
            encoded = results.encode(outcome.result)
            if len(encoded) > self.inline_result_max_bytes:
                try:
                    uri = await self.artifacts.put(
                        task_id, results.RESULT_ARTIFACT_NAME, encoded, results.RESULT_ARTIFACT_MIME
                    )
                except ValueError as exc:
                    raise ChannelError(413, str(exc)) from exc
                outcome = Finished(result=results.linked_result(uri, len(encoded), bool(outcome.result.get("isError"))))
        try:
            await self._change(execution, recording(outcome))
        except StoreUnavailable:
            execution.unrecorded = outcome  # the tool retries; its supervisor records it if the tool cannot
            raise
        execution.settle(outcome)

    @staticmethod
    def _parse_outcome(body: Mapping[str, object]) -> Finished:
        result = body.get("result")
        error = body.get("error")
        if isinstance(result, dict):
            try:
                validated = CallToolResult.model_validate(result)
            except ValidationError as exc:
                raise ChannelError(400, f"result is not a valid CallToolResult: {exc.errors()[0]['msg']}") from exc
            cleaned = validated.model_dump(by_alias=True, mode="json", exclude_none=True)
            cleaned.pop("resultType", None)
            return Finished(result=cleaned)
        if isinstance(error, dict) and isinstance(error.get("code"), int) and isinstance(error.get("message"), str):
            status_message = body.get("statusMessage")
            return Finished(
                error={k: v for k, v in error.items() if k in {"code", "message", "data"}},
                status_message=status_message[:1000] if isinstance(status_message, str) else None,
            )
        raise ChannelError(400, "body must be {result: CallToolResult} or {error: {code: int, message: str}}")
