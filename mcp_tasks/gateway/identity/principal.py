"""What authentication yields (`Identity`) and how it refuses (`Refused`, with a bounded reason).

Used by every mechanism (`oidc`, `service_accounts`, the static token file through `gate`), by the audit
line and by the refusal metric. Nothing here does I/O (`IDENTITY_KEY` is only where a request keeps it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, get_args

from aiohttp import web

from mcp_tasks.tasks.owner import Owner

Mechanism = Literal["local", "static", "oidc", "kubernetes"]
"""How a principal proved itself: the unconfigured local principal, the token file, an OIDC JWT, a
Kubernetes ServiceAccount token."""

RefusalReason = Literal[
    "missing_token",
    "invalid_token",
    "malformed_token",
    "unknown_issuer",
    "bad_algorithm",
    "unknown_key",
    "bad_signature",
    "expired",
    "not_yet_valid",
    "wrong_audience",
    "missing_claim",
    "issuer_unavailable",
    "insufficient_scope",
]
"""Why a request was refused: the label of `mcptasks_auth_refusals_total` (a closed set)."""

REFUSAL_REASONS: Final[tuple[RefusalReason, ...]] = get_args(RefusalReason)


@dataclass(frozen=True, slots=True)
class Identity:
    """An authenticated principal and how it was established.

    Attributes:
        owner: the `(tenant, subject)` that owns the tasks this request creates.
        mechanism: which mechanism accepted the token.
        issuer: the token's issuer (OIDC `iss`, `kubernetes` for a ServiceAccount token), else `None`.
        scopes: the scopes the token grants (OIDC `scope`/`scp`), or `None` where the mechanism has no
            scopes and every tool is open (local principal, static tokens, ServiceAccount tokens).
    """

    owner: Owner
    mechanism: Mechanism
    issuer: str | None = None
    scopes: frozenset[str] | None = None

    def may_use(self, required: frozenset[str]) -> bool:
        """True when this principal holds every scope in `required` (an empty set is open to all)."""
        return not required or self.scopes is None or required <= self.scopes


IDENTITY_KEY: Final = web.RequestKey("mcp_identity", Identity)
"""Where `gate.authenticate` leaves the request's identity (for the audit line and per-tool scopes)."""

TOOL_KEY: Final = web.RequestKey("mcp_tool", str)
"""The tool a `tools/call` names, from its body (for the audit line of a legacy-era call, which has no `Mcp-Name`)."""


class Refused(Exception):
    """A request is not authenticated (HTTP 401), or the issuer cannot be asked now (HTTP 503).

    The message is for the client (`error_description`): it never holds the token or its claims.

    Attributes:
        reason: the bounded reason counted in the refusal metric.
        token_sent: whether the request carried a bearer token (then the challenge says `invalid_token`).
    """

    def __init__(self, reason: RefusalReason, message: str, *, token_sent: bool = True) -> None:
        super().__init__(message)
        self.reason: RefusalReason = reason
        self.token_sent = token_sent

    @property
    def http_status(self) -> int:
        """401, or 503 when the token could not be checked because its issuer did not answer."""
        return 503 if self.reason == "issuer_unavailable" else 401
