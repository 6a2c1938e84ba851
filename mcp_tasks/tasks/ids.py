"""Task id minting: 128 bits from the OS CSPRNG, as 32 lowercase hex characters.

Ids are bearer-strength handles (SEP-2567 guidance: ≥128 bits), header-safe ASCII for `Mcp-Name`,
and valid Kubernetes object names (the McpTask CR name is the taskId).
"""

from __future__ import annotations

import secrets
from typing import NewType

TaskId = NewType("TaskId", str)


def mint_task_id() -> TaskId:
    """Return a fresh task id: 32 hex characters (128 random bits)."""
    return TaskId(secrets.token_hex(16))
