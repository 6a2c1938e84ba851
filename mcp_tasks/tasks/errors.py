"""Domain errors of the task model. They know nothing of JSON-RPC; the gateway maps them by a table."""

from __future__ import annotations


class TaskError(Exception):
    """Base of every domain error."""


class TaskNotFound(TaskError):
    """No task with this id is visible to the caller: never created, expired, or owned by someone else."""


class VersionConflict(TaskError):
    """A compare-and-swap write lost: the record changed since it was read. Re-read and retry."""


class WrongWriter(TaskError):
    """A write changes what only the other writer may change (`interfaces.Writer`): a client write that
    touches executor status, or an executor write that touches client intent. A programming error.
    """


class IllegalTransition(TaskError):
    """The requested status change is not in the transition table (terminal states never change)."""


class LeaseLost(TaskError):
    """The caller's worker lease on a task is gone (expired, or claimed by another holder)."""


class InvalidInputResponse(TaskError):
    """An answer in `tasks/update` does not fit the input request it answers (e.g. not an `ElicitResult`)."""


class InputCapabilityMissing(TaskError):
    """An input request needs a capability the client that created the task did not declare.

    `capability` names it (`elicitation`, `elicitation.url`, `elicitation.form`, `sampling`, `roots`).
    """

    def __init__(self, capability: str, method: str) -> None:
        super().__init__(
            f"the client that made this call did not declare the {capability!r} capability, so it cannot be "
            f"sent {method!r}; nothing was asked. Declare it in the request's _meta clientCapabilities to "
            "answer such input"
        )
        self.capability = capability


class ResultTooLarge(TaskError):
    """A tool result exceeds the artifact limit and cannot be stored at all."""


class ToolNotFound(TaskError):
    """No tool of this name is in the catalog."""


class InvalidToolManifest(TaskError):
    """An `McpTool` manifest is malformed; the message names the file and the field."""


class UnstorableValue(TaskError):
    """A JSON value cannot be stored exactly by this store (e.g. an integer beyond 64 bits in Kubernetes)."""


class StoreUnavailable(TaskError):
    """The task store did not answer in time or failed transiently; the request may be retried."""


class LimitReached(TaskError):
    """A limit of `tasks.limits` refuses the request; nothing was stored or started.

    Attributes:
        limit: the `LimitSettings` field that refuses (`max_unfinished_per_principal`,
            `task_create_rate_per_principal`, `max_running_per_tenant`, ...).
        maximum: its value for the caller (after its tenant's override).
        retry_after_ms: when a retry may succeed, in milliseconds (a rate's next token, a running slot
            checked again); `None` when only the caller's own action frees room (finishing or cancelling tasks).
    """

    def __init__(self, message: str, limit: str, maximum: float, retry_after_ms: int | None = None) -> None:
        super().__init__(message)
        self.limit = limit
        self.maximum = maximum
        self.retry_after_ms = retry_after_ms
