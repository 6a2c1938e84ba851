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
    "tenant_not_allowed",
]
"""Why a request was refused: the label of `mcptasks_auth_refusals_total` (a closed set)."""

REFUSAL_REASONS: Final[tuple[RefusalReason, ...]] = get_args(RefusalReason)


@dataclass(frozen=True, slots=True)
class Identity:
    """An authenticated principal and how it was established.

    Attributes:
        owner: the `(tenant, subject, issuer)` that owns the tasks this request creates; its issuer is who
            vouched for the caller (`static`, `local`, `kubernetes` or the OIDC `iss`).
        mechanism: which mechanism accepted the token.
        scopes: the scopes the token grants (OIDC `scope`/`scp`), or `None` where the mechanism has no
            scopes and every tool is open (local principal, static tokens, ServiceAccount tokens).
    """

    owner: Owner
    mechanism: Mechanism
    scopes: frozenset[str] | None = None

    @property
    def issuer(self) -> str:
        """Who vouched for this principal (`owner.issuer`)."""
        return self.owner.issuer

    def may_use(self, required: frozenset[str]) -> bool:
        """True when this principal holds every scope in `required` (an empty set is open to all)."""
        return not required or self.scopes is None or required <= self.scopes


IDENTITY_KEY: Final = web.RequestKey("mcp_identity", Identity)
"""Where `gate.authenticate` leaves the request's identity (for the audit line and per-tool scopes)."""

TOOL_KEY: Final = web.RequestKey("mcp_tool", str)
"""The tool a `tools/call` names, from its body (for the audit line of a legacy-era call, which has no `Mcp-Name`)."""


class Refused(Exception):
    """A request is not authenticated (HTTP 401), its issuer may not vouch for its tenant (HTTP 403), or
    the issuer cannot be asked now (HTTP 503).

    The message is for the client (`error_description`): it never holds the token. `issuer` and
    `subject` are for the operator's log line only: what the token claimed (unverified unless the
    refusal came after its signature verified), `None` where it claimed nothing readable.

    Attributes:
        reason: the bounded reason counted in the refusal metric.
        token_sent: whether the request carried a bearer token (then the challenge says `invalid_token`).
        issuer: the issuer the token named, if any.
        subject: the subject the token named, if any.
        identity: the verified principal a `tenant_not_allowed` refusal turned away (for its audit line).
    """

    def __init__(
        self,
        reason: RefusalReason,
        message: str,
        *,
        token_sent: bool = True,
        issuer: str | None = None,
        subject: str | None = None,
        identity: Identity | None = None,
    ) -> None:
        super().__init__(message)
        self.reason: RefusalReason = reason
        self.token_sent = token_sent
        self.issuer = issuer
        self.subject = subject
        self.identity = identity

    @property
    def http_status(self) -> int:
        """401; 403 for a tenant its issuer may not vouch for; 503 when the issuer did not answer."""
        if self.reason == "issuer_unavailable":
            return 503
        return 403 if self.reason == "tenant_not_allowed" else 401
