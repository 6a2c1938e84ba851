"""Worker tokens: the per-run credential a tool presents to the worker API, derived from a key.

A run's token is `HMAC-SHA256(key, execution_id)`, where the execution id is `<taskId>.<attempt>` for a
task's run. Deriving it (rather than keeping a table) lets any holder of the key verify a call: a
restarted embedded runner with the persisted key, or any operator replica sharing it. Both executors'
`resolve` go through `WorkerTokens.verify`; nothing else compares tokens.
"""

from __future__ import annotations

import hashlib
import hmac

from mcp_tasks.tasks.ids import TaskId


class WorkerTokens:
    """Derives and verifies run tokens with one key (32 random bytes, or the shared operator secret)."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    def token_for(self, execution_id: str) -> str:
        """The worker token of the run `execution_id`: 64 hex characters."""
        return hmac.new(self._key, execution_id.encode(), hashlib.sha256).hexdigest()

    def verify(self, execution_id: str, token: str) -> tuple[TaskId, int] | None:
        """`(taskId, attempt)` of a task run whose `token` is the one derived for `execution_id`; else None.

        Compared in constant time. Executions that are not a task's run (`<taskId>.<attempt>`) never
        verify: they live only in the executor's own table.
        """
        task_id, _, attempt = execution_id.rpartition(".")
        if not task_id or not attempt.isdigit():
            return None
        if not hmac.compare_digest(token.encode(), self.token_for(execution_id).encode()):
            return None
        return TaskId(task_id), int(attempt)
