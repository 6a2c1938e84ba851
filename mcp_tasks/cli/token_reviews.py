"""Kubernetes ServiceAccount tokens as MCP credentials: the gateway's `TokenReviewer`, over a `TokenReview`.

Wiring between two layers that must not import each other: the gateway's identity `Gate` names what it
needs (`identity.gate.TokenReviewer`), and this adapter asks the API server through the one Kubernetes
API edge (`store.kubernetes.client.call`: bounded, errors mapped). Built by `cli.gateway` when
`MCPTASKS_SERVICE_ACCOUNT_TOKENS` is on. The principal is the token's namespace (tenant) and
ServiceAccount name (subject). Accepted tokens are remembered by digest for a short while (never past
their `exp`), so a busy agent costs one review a minute, not one per request. Never logs a token.
"""

from __future__ import annotations

import hashlib
import logging
import time
from typing import Any, Final, cast

import jwt
from kubernetes_asyncio.client import ApiClient

from mcp_tasks.gateway.identity.principal import Identity, Refused
from mcp_tasks.store.kubernetes import client
from mcp_tasks.tasks.errors import StoreUnavailable
from mcp_tasks.tasks.owner import SERVICE_ACCOUNT_ISSUER, Owner

logger = logging.getLogger("mcp_tasks.gateway.identity")

ISSUER: Final = SERVICE_ACCOUNT_ISSUER
"""The `issuer` of a ServiceAccount principal in the audit trail."""

REMEMBER_S: Final = 60.0
"""How long an accepted token is trusted without another review, in seconds (capped by its `exp`)."""

MAX_REMEMBERED: Final = 4096
"""Most accepted tokens remembered at once (the memory is cleared when full)."""

_PREFIX: Final = "system:serviceaccount:"


class TokenReviews:
    """`TokenReviewer` over the API server's `TokenReview` (authentication.k8s.io/v1).

    Args:
        api: the gateway's API client (its account needs `create` on `tokenreviews`).
        timeout_s: deadline of one review, in seconds.
    """

    def __init__(self, api: ApiClient, timeout_s: float = 5.0) -> None:
        self._api = client.Apis(api)
        self._timeout_s = timeout_s
        self._accepted: dict[tuple[str, str], tuple[Identity, float]] = {}

    async def review(self, token: str, audience: str) -> Identity:
        """The principal of a ServiceAccount `token` issued for `audience`.

        Raises:
            Refused: `invalid_token` when the API server does not authenticate it for `audience` or it is
                not a ServiceAccount's; `issuer_unavailable` when the API server does not answer in time.
        """
        key = (hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest(), audience)
        now = time.monotonic()
        known = self._accepted.get(key)
        if known is not None and known[1] > now:
            return known[0]
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token, "audiences": [audience]},
        }
        try:
            answer = await client.call(self._api.auth.create_token_review, cast(Any, body), timeout_s=self._timeout_s)
        except (client.ApiError, StoreUnavailable) as exc:
            logger.warning("a ServiceAccount token could not be reviewed: %s", exc)
            raise Refused("issuer_unavailable", "The Kubernetes API server cannot review the token now") from exc
        status = answer.status
        if not status.authenticated or audience not in (status.audiences or []):
            raise Refused("invalid_token", f"The token is not a valid Kubernetes token for the audience {audience}")
        username = str(status.user.username or "")
        namespace, _, account = username.removeprefix(_PREFIX).partition(":")
        if not username.startswith(_PREFIX) or not namespace or not account:
            raise Refused("invalid_token", "The token is not a ServiceAccount's")
        identity = Identity(Owner(namespace, account, ISSUER), "kubernetes")
        if len(self._accepted) >= MAX_REMEMBERED:
            self._accepted.clear()
        self._accepted[key] = (identity, now + min(REMEMBER_S, _seconds_left(token)))
        return identity


def _seconds_left(token: str) -> float:
    """Seconds until the (already reviewed) token's `exp`; 0 when it has none we can read."""
    try:
        exp = jwt.decode(token, options={"verify_signature": False}).get("exp")
    except jwt.PyJWTError:
        return 0.0
    return max(0.0, float(exp) - time.time()) if isinstance(exp, (int, float)) else 0.0
