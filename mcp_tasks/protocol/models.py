"""Wire models of the `io.modelcontextprotocol/tasks` extension (SEP-2663, ext-tasks `schema.ts`).

Core 2026-07-28 models (`CallToolResult`, `Tool`, `DiscoverResult`, ...) come from `mcp-types`;
the extension's models are ours and live here, on `mcp_types`' base so that attribute names are
the snake_case form of the spec names and serialisation uses the camelCase alias. No I/O.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Final, Literal

from mcp_types import RequestParams, Result
from mcp_types._types import MCPModel
from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from mcp_tasks.protocol.errors import JsonObject


class TaskStatus(StrEnum):
    """`TaskStatus` (SEP-2663 Task Status): the five wire states of a task."""

    WORKING = "working"
    INPUT_REQUIRED = "input_required"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        """True for `completed`, `failed` and `cancelled`: states that never change again."""
        return self in TERMINAL_STATUSES


TERMINAL_STATUSES: Final = frozenset({TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED})

_ALWAYS_PRESENT: Final = frozenset({"ttlMs", "ttl_ms"})
"""`Task.ttlMs` is required on the wire but may be `null` (unlimited); every other `None` is omitted."""


class _WireModel(MCPModel):
    """Drop absent optional fields on dump, but keep the required-nullable `ttlMs`."""

    @model_serializer(mode="wrap")
    def _omit_absent(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v is not None or k in _ALWAYS_PRESENT}
        return data

    def to_wire(self) -> JsonObject:
        """Serialise with wire (camelCase) names; absent optionals omitted, `ttlMs` always present."""
        data: JsonObject = self.model_dump(by_alias=True, mode="json")
        return data


class Task(_WireModel):
    """`Task`: task metadata shared by every status (SEP-2663 Task).

    `created_at`/`last_updated_at` are ISO 8601 UTC strings. `ttl_ms` is integer milliseconds from
    `created_at` (or `None` for unlimited) and may change over the task's life; `poll_interval_ms`
    is the suggested `tasks/get` cadence in milliseconds.
    """

    task_id: str
    status: TaskStatus
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None
    poll_interval_ms: int | None = None


class DetailedTask(Task):
    """`DetailedTask`: a `Task` with its status-specific payload inlined (SEP-2663 `tasks/get`).

    `input_requests` (key → `{method, params}`) only when `input_required`; `result` (the
    `CallToolResult`, with `resultType: "complete"`) only when `completed`; `error` (a JSON-RPC
    error object `{code, message, data?}`) only when `failed`.
    """

    input_requests: dict[str, JsonObject] | None = None
    result: JsonObject | None = None
    error: JsonObject | None = None


class CreateTaskResult(Task, Result):
    """`CreateTaskResult`: the flat `tools/call` result that hands out a task (SEP-2663 Creating Tasks)."""

    result_type: Literal["task"] = "task"
    meta: dict[str, Any] | None = Field(alias="_meta", default=None)


class GetTaskResult(DetailedTask, Result):
    """`GetTaskResult`: the `tasks/get` result, a `DetailedTask` with `resultType: "complete"`."""

    result_type: Literal["complete"] = "complete"
    meta: dict[str, Any] | None = Field(alias="_meta", default=None)


class TaskNotificationParams(DetailedTask):
    """`notifications/tasks` params: the full `DetailedTask` plus `_meta` (no `resultType`)."""

    meta: dict[str, Any] | None = Field(alias="_meta", default=None)


class TaskRequestParams(RequestParams):
    """Params of `tasks/get` and `tasks/cancel`: `{taskId, _meta}`."""

    task_id: str = Field(min_length=1, max_length=256)


class UpdateTaskRequestParams(TaskRequestParams):
    """Params of `tasks/update`: `{taskId, inputResponses, _meta}`.

    `input_responses` maps input-request keys to bare responses (`ElicitResult`, `CreateMessageResult`,
    `ListRootsResult`). Values are kept as JSON: unknown keys are ignored, never validated.
    """

    input_responses: dict[str, Any] = Field(default_factory=dict)
