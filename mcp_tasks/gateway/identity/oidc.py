"""OpenID Connect JWT access tokens: issuer discovery, cached JWKS, and token checks (PyJWT, no own crypto).

`OidcVerifier.verify` is called by `gate` for a JWT whose unverified `iss` is a configured issuer. It
checks the signature with an asymmetric algorithm only (`none` and HMAC are refused before any key is
looked up), `iss`, `aud` (the RFC 8707 resource binding: exactly this server's audience), `exp` and
`nbf` with a small leeway. Keys come from the issuer's discovery document and JWKS, fetched with a
deadline and a size bound, cached for `oidc_jwks_max_age_s`, and fetched again on an unknown `kid` at
most every `oidc_jwks_refresh_min_s` per issuer. Never logs a token or its claims.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

import aiohttp
import jwt

from mcp_tasks.gateway.identity.principal import Identity, Refused
from mcp_tasks.gateway.identity.settings import AuthSettings
from mcp_tasks.tasks.owner import Owner

logger = logging.getLogger("mcp_tasks.gateway.identity")

ASYMMETRIC_ALGORITHMS: Final = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
"""JWS algorithms accepted (RFC 7518): public-key signatures only; `none` and `HS*` never."""

MAX_DOCUMENT_BYTES: Final = 256 * 1024
"""Largest discovery document or JWKS read from an issuer, in bytes."""

JsonDocument = dict[str, Any]
"""A parsed discovery document or JWKS (JSON boundary)."""


def check_issuer_url(url: str) -> None:
    """Refuse an issuer or JWKS URL that is not `https://`, or `http://` on a loopback address.

    Raises:
        ValueError: the message says which URL and why.
    """
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
    except ValueError as exc:
        raise ValueError(f"{url!r} is not a URL") from exc
    if parts.scheme == "https" and host:
        return
    if parts.scheme == "http" and (host == "localhost" or _is_loopback_literal(host)):
        return
    raise ValueError(f"{url!r} must be an https:// URL (http:// only on a loopback address)")


def _is_loopback_literal(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def discovery_urls(issuer: str) -> tuple[str, str]:
    """OpenID Connect Discovery 1.0 §4 first, then RFC 8414 §3 (well-known segment before the path)."""
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")
    oidc = f"{parts.scheme}://{parts.netloc}{path}/.well-known/openid-configuration"
    rfc8414 = f"{parts.scheme}://{parts.netloc}/.well-known/oauth-authorization-server{path}"
    return oidc, rfc8414


async def fetch_json(session: aiohttp.ClientSession, url: str, timeout_s: float) -> JsonDocument:
    """GET a JSON object within `timeout_s` seconds and `MAX_DOCUMENT_BYTES` (no redirects followed).

    Raises:
        Refused: `issuer_unavailable` on any network error, non-200 answer, oversize or non-JSON body.
    """
    try:
        async with asyncio.timeout(timeout_s):
            async with session.get(url, allow_redirects=False, headers={"Accept": "application/json"}) as response:
                if response.status != 200:
                    raise ValueError(f"HTTP {response.status}")
                body = bytearray()
                async for chunk in response.content.iter_any():
                    body += chunk
                    if len(body) > MAX_DOCUMENT_BYTES:
                        raise ValueError(f"larger than {MAX_DOCUMENT_BYTES} bytes")
        document = json.loads(body)
        if not isinstance(document, dict):
            raise ValueError("not a JSON object")
        return document
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        logger.warning("identity provider document unavailable: %s (%s)", url, exc)
        raise Refused("issuer_unavailable", "The token's issuer cannot be reached; retry later") from exc


class IssuerKeys:
    """One issuer's signing keys: discovered once, cached, refreshed when stale or on an unknown `kid`.

    One lock per issuer: concurrent requests that miss a key share one fetch.
    """

    def __init__(
        self,
        issuer: str,
        session: Callable[[], aiohttp.ClientSession],
        settings: AuthSettings,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.issuer = issuer
        self._session = session
        self._settings = settings
        self._clock = clock
        self._jwks_uri: str | None = None
        self._keys: dict[str | None, _Key] = {}
        self._fetched_at: float | None = None
        self._lock = asyncio.Lock()

    async def key(self, kid: str | None, alg: str) -> jwt.PyJWK:
        """The key that signed a token with header `kid` and `alg`.

        Raises:
            Refused: `unknown_key` when the issuer does not publish it (after at most one refetch),
                `issuer_unavailable` when the issuer cannot be asked.
        """
        now = self._clock()
        stale = self._fetched_at is None or now - self._fetched_at >= self._settings.oidc_jwks_max_age_s
        if stale:
            await self._refresh(self._fetched_at)
        found = self._find(kid, alg)
        if found is None and not stale:
            assert self._fetched_at is not None  # set by every refresh; `stale` covers the first
            if self._clock() - self._fetched_at >= self._settings.oidc_jwks_refresh_min_s:
                await self._refresh(self._fetched_at)
                found = self._find(kid, alg)
        if found is None:
            raise Refused("unknown_key", "The token is signed by a key its issuer does not publish")
        return found

    def _find(self, kid: str | None, alg: str) -> jwt.PyJWK | None:
        if kid is not None:
            found = self._keys.get(kid)
        else:  # no kid: only an unambiguous key will do
            fitting = [k for k in self._keys.values() if k.alg in (alg, None)]
            found = fitting[0] if len(fitting) == 1 else None
        # a key published for one algorithm is not used with another (RFC 7517 §4.4)
        return found.key if found is not None and found.alg in (None, alg) else None

    async def _refresh(self, seen: float | None) -> None:
        async with self._lock:
            if self._fetched_at != seen:  # another request refreshed while this one waited
                return
            timeout_s = self._settings.oidc_fetch_timeout_s
            session = self._session()
            if self._jwks_uri is None:
                self._jwks_uri = await self._discover(session, timeout_s)
            document = await fetch_json(session, self._jwks_uri, timeout_s)
            self._keys = _signing_keys(document)
            self._fetched_at = self._clock()
            logger.info("fetched %d signing keys of issuer %s", len(self._keys), self.issuer)

    async def _discover(self, session: aiohttp.ClientSession, timeout_s: float) -> str:
        last: Refused | None = None
        for url in discovery_urls(self.issuer):
            try:
                document = await fetch_json(session, url, timeout_s)
            except Refused as exc:
                last = exc
                continue
            jwks_uri = document.get("jwks_uri")
            if document.get("issuer") != self.issuer or not isinstance(jwks_uri, str):
                logger.warning("discovery document at %s does not name issuer %s and a jwks_uri", url, self.issuer)
                continue
            try:
                check_issuer_url(jwks_uri)
            except ValueError:
                logger.warning("issuer %s publishes a jwks_uri that is not https: refused", self.issuer)
                continue
            return jwks_uri
        raise last or Refused("issuer_unavailable", "The token's issuer publishes no usable discovery document")


@dataclass(frozen=True, slots=True)
class _Key:
    """A published key and the algorithm it is published for (`alg` of the JWK, if any)."""

    key: jwt.PyJWK
    alg: str | None


def _signing_keys(document: JsonDocument) -> dict[str | None, _Key]:
    """Public signature keys of a JWKS by `kid` (keys for encryption, symmetric or unusable ones skipped)."""
    keys: dict[str | None, _Key] = {}
    entries = document.get("keys")
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or entry.get("use", "sig") != "sig" or entry.get("kty") == "oct":
            continue
        if "d" in entry:  # a private key has no place in a JWKS: do not use what should not be there
            continue
        try:
            key = jwt.PyJWK(entry)
        except (jwt.PyJWTError, ValueError, TypeError):
            continue
        kid = entry.get("kid")
        alg = entry.get("alg")
        keys[kid if isinstance(kid, str) else None] = _Key(key, alg if isinstance(alg, str) else None)
    return keys


_REFUSALS: Final[tuple[tuple[type[jwt.PyJWTError], Refused], ...]] = (
    (jwt.ExpiredSignatureError, Refused("expired", "The token has expired; obtain a new one")),
    (jwt.ImmatureSignatureError, Refused("not_yet_valid", "The token is not valid yet")),
    (
        jwt.InvalidAudienceError,
        Refused("wrong_audience", "The token was issued for another resource; request one for this server"),
    ),
    (jwt.InvalidIssuerError, Refused("unknown_issuer", "The token's issuer is not trusted here")),
    (jwt.InvalidSignatureError, Refused("bad_signature", "The token's signature does not verify")),
    (jwt.MissingRequiredClaimError, Refused("missing_claim", "The token lacks a required claim (exp, iss, aud)")),
)


def _audience_hint(what: str, audience: str) -> str:
    """A refusal that names the audience this server accepts (its resource URI: public, in the metadata)."""
    return (
        f"{what}; this server accepts tokens for {audience!r}. Request the token with resource={audience} "
        "(RFC 8707), or have the identity provider put that value in aud (docs/security.md)"
    )


class OidcVerifier:
    """Checks JWT access tokens of the configured issuers (`AuthSettings.oidc_*`)."""

    def __init__(self, settings: AuthSettings, session: Callable[[], aiohttp.ClientSession]) -> None:
        self._settings = settings
        self.issuers: dict[str, IssuerKeys] = {
            issuer: IssuerKeys(issuer, session, settings) for issuer in settings.oidc_issuer
        }

    async def verify(self, token: str, header: dict[str, Any], issuer: str, audience: str) -> Identity:
        """The principal of `token`, whose unverified header is `header` and claimed issuer `issuer`.

        Raises:
            Refused: with the reason (bad algorithm, unknown key, signature, expiry, audience, claims).
        """
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in ASYMMETRIC_ALGORITHMS:
            raise Refused("bad_algorithm", "The token must be signed with an asymmetric algorithm (RS, PS, ES, EdDSA)")
        kid = header.get("kid")
        key = await self.issuers[issuer].key(kid if isinstance(kid, str) else None, alg)
        try:
            claims = jwt.decode(
                token,
                key=key.key,
                algorithms=[alg],
                audience=audience,
                issuer=issuer,
                leeway=self._settings.oidc_leeway_s,
                options={"require": ["exp", "iss", "aud"], "strict_aud": False},
            )
        except jwt.MissingRequiredClaimError as exc:
            if exc.claim == "aud":
                raise Refused("missing_claim", _audience_hint("The token carries no audience (aud)", audience)) from exc
            raise Refused("missing_claim", f"The token lacks the required claim {exc.claim!r}") from exc
        except jwt.InvalidAudienceError as exc:
            raise Refused(
                "wrong_audience", _audience_hint("The token was issued for another audience", audience)
            ) from exc
        except jwt.PyJWTError as exc:
            for kind, refusal in _REFUSALS:
                if isinstance(exc, kind):
                    raise Refused(refusal.reason, str(refusal)) from exc
            raise Refused("invalid_token", "The token is not a valid JWT") from exc
        return Identity(self._owner(claims, issuer), "oidc", _scopes(claims))

    def _owner(self, claims: dict[str, Any], issuer: str) -> Owner:
        subject = claims.get(self._settings.oidc_subject_claim)
        tenant_claim = self._settings.oidc_tenant_claim
        tenant = issuer if tenant_claim is None else claims.get(tenant_claim)
        if not isinstance(subject, str) or not subject or not isinstance(tenant, str) or not tenant:
            names = self._settings.oidc_subject_claim + ("" if tenant_claim is None else f" and {tenant_claim}")
            raise Refused("missing_claim", f"The token must carry non-empty string claims {names}")
        return Owner(tenant, subject, issuer)


def _scopes(claims: dict[str, Any]) -> frozenset[str]:
    """Granted scopes: RFC 9068 `scope` (space-separated) and the `scp` list some issuers use instead."""
    scopes: set[str] = set()
    scope = claims.get("scope")
    if isinstance(scope, str):
        scopes.update(scope.split())
    scp = claims.get("scp")
    if isinstance(scp, list):
        scopes.update(item for item in scp if isinstance(item, str))
    elif isinstance(scp, str):
        scopes.update(scp.split())
    return frozenset(scopes)
