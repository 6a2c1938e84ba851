"""Ownership: the principal a task is bound to (ARCHITECTURE.md §Ownership).

Every request is authenticated to an `Owner(tenant, subject)`; a task is visible only to the owner
that created it. For anyone else it behaves exactly like an id that never existed.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Owner:
    """The authenticated principal: `tenant` (isolation boundary) and `subject` (user or service id)."""

    tenant: str
    subject: str

    @property
    def tenant_hash(self) -> str:
        """A short, non-reversible tag of the tenant for logs and labels (sha256, 16 hex chars)."""
        return hashlib.sha256(self.tenant.encode()).hexdigest()[:16]


LOCAL_OWNER = Owner(tenant="local", subject="local")
"""The single principal of a server started without a token file (loopback only)."""
