"""Ownership: the principal a task is bound to (ARCHITECTURE.md §Ownership).

Every request is authenticated to an `Owner(tenant, subject, issuer)`; a task is visible only to the
owner that created it. For anyone else it behaves exactly like an id that never existed.

`issuer` says who vouched for the principal: an OpenID Connect issuer's URL (`iss`), or one of the
words `static` (the token file), `kubernetes` (a ServiceAccount token checked by a `TokenReview`) and
`local` (the unconfigured loopback principal). An issuer URL always holds `://`, so no issuer can be
mistaken for another mechanism. Two principals with the same tenant and subject but different issuers
are different owners: no issuer speaks for another's users (docs/security.md §Owners).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from dataclasses import dataclass
from typing import Final

LOCAL_ISSUER: Final = "local"
"""Who vouches for the single local principal of a server without any authentication configured."""
STATIC_ISSUER: Final = "static"
"""Who vouches for a principal of the static token file."""
SERVICE_ACCOUNT_ISSUER: Final = "kubernetes"
"""Who vouches for a Kubernetes ServiceAccount token (the API server, through a `TokenReview`)."""
UNKNOWN_ISSUER: Final = ""
"""The issuer of a task stored before owners named their issuer, when no one can be named for it
(`legacy_issuer`): it matches no caller, so such a task is readable by nobody until configured."""


@dataclass(frozen=True, slots=True)
class Owner:
    """The authenticated principal.

    Attributes:
        tenant: the isolation boundary (a team, a namespace).
        subject: the user or service id within it.
        issuer: who vouched for it (an OIDC issuer URL, `static`, `kubernetes` or `local`; see the module).
    """

    tenant: str
    subject: str
    issuer: str

    @property
    def tenant_hash(self) -> str:
        """A short, non-reversible tag of the tenant for logs and labels (sha256, 16 hex chars)."""
        return hashlib.sha256(self.tenant.encode()).hexdigest()[:16]

    @property
    def mechanism(self) -> str:
        """How the principal proved itself: `oidc`, `static`, `kubernetes`, `local`, or `unknown`."""
        if "://" in self.issuer:
            return "oidc"
        return self.issuer or "unknown"


def owns(stored: Owner, caller: Owner) -> bool:
    """Whether `caller` owns a task stored as owned by `stored`: the same tenant, subject and issuer, and
    an issuer that is known (a task whose issuer is `UNKNOWN_ISSUER` is nobody's, whoever asks).
    """
    return stored == caller and stored.issuer != UNKNOWN_ISSUER


LOCAL_OWNER: Final = Owner(tenant="local", subject="local", issuer=LOCAL_ISSUER)
"""The single principal of a server started without a token file (loopback only)."""


def legacy_issuer(configured: str | None, vouchers: Collection[str]) -> str:
    """Who vouched for the owners of tasks stored before owners named their issuer.

    Such a record names only `(tenant, subject)`. It is given exactly one issuer: `configured` (the
    setting `MCPTASKS_LEGACY_OWNER_ISSUER`) when set, else the one issuer this server trusts when it
    trusts exactly one (then every such task was necessarily created through it), else
    `UNKNOWN_ISSUER`, which no caller ever has. So the mapping never lets a second issuer read a task.

    Args:
        configured: the operator's choice, or None.
        vouchers: every issuer this server trusts now (`static`, each OIDC issuer URL, `kubernetes`, or
            `local` alone).
    """
    if configured:
        return configured
    trusted = set(vouchers)
    return next(iter(trusted)) if len(trusted) == 1 else UNKNOWN_ISSUER
