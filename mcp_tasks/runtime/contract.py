"""The tool runtime contract: environment variables and worker-API paths a tool process uses.

Shared by the tool side (`mcp_tasks.runtime`) and the executors that serve it (embedded runner;
the Kubernetes operator). Documented for other languages in `docs/tool-runtime.md`.
Standard library only.
"""

from __future__ import annotations

from typing import Final

ENV_WORKER_URL: Final = "MCPTASKS_WORKER_URL"
"""Base URL of this execution on the worker API, e.g. `http://127.0.0.1:41234/v1/executions/<id>`."""
ENV_WORKER_TOKEN: Final = "MCPTASKS_WORKER_TOKEN"
"""Bearer token that authorizes this process, and only it, on its own execution."""
ENV_TASK_ID: Final = "MCPTASKS_TASK_ID"
"""The MCP `taskId` when the run is a task; empty for a synchronous (non-task) run."""

PATH_INPUT: Final = "/input"
"""GET → `{"arguments": {...}, "inputResponses": {...}, "taskId": str|null, "attempt": int}`."""
PATH_STATUS: Final = "/status"
"""POST `{"statusMessage": str}` → 204. Shown to clients as the task's `statusMessage`."""
PATH_INPUT_REQUESTS: Final = "/input-requests"
"""POST `{"inputRequests": {suggestedKey: {method, params}}}` → `{"keys": {suggestedKey: mintedKey}}`.

409 for a synchronous run: only a task can wait for input. 412 when the client that created the task did
not declare the capability a request needs (`elicitation`, `elicitation.url`, `sampling`, `roots`); the
body says which, and nothing is issued."""
PATH_INPUT_RESPONSES: Final = "/input-responses"
"""GET `?keys=a,b&waitMs=N` → `{"inputResponses": {key: response}}`: answers not yet taken, possibly
partial, after waiting up to `waitMs` (capped by the server) for at least one. Each answer is handed out once."""
PATH_RESULT: Final = "/result"
"""POST `{"result": CallToolResult}` or `{"error": {code, message, data?}, "statusMessage": str}` → 204.

409 when the execution already finished or was cancelled."""

MAX_WAIT_MS: Final = 25_000
"""Longest single `input-responses` wait the server honours, in ms; the helper simply asks again."""
