"""Tool-side runtime: what a tool process imports (standard library only; a warm worker also imports
PyJWT and `cryptography`, dependencies of mcp-tasks, to open its callers' sessions: `call_auth`).

See `docs/tool-runtime.md` for the plain-HTTP contract behind it.
"""

from mcp_tasks.runtime import content, contract
from mcp_tasks.runtime.tool import (
    ClientLacksCapability,
    InputRequestFailed,
    ProtocolFailure,
    ToolContext,
    ToolError,
    WorkerApiError,
    run,
    text_result,
)

__all__ = [
    "ClientLacksCapability",
    "InputRequestFailed",
    "ProtocolFailure",
    "ToolContext",
    "ToolError",
    "WorkerApiError",
    "content",
    "contract",
    "run",
    "text_result",
]
