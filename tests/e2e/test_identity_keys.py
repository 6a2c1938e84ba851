"""The OIDC verifier against a small issuer of our own (aiohttp on 127.0.0.1): key caching, refetch on an
unknown `kid` with a rate limit, fetch deadlines, algorithm rules; and the settings and challenge rules.

The real identity provider is in `tests/identity/`; these cover what it cannot be made to do on demand.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import pytest
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from mcp_tasks.cli.settings import ServeSettings, Settings, SettingsError, validate
from mcp_tasks.gateway.identity import metadata
from mcp_tasks.gateway.identity.oidc import IssuerKeys, OidcVerifier, check_issuer_url
from mcp_tasks.gateway.identity.principal import Refused
from mcp_tasks.gateway.identity.settings import AuthSettings

AUDIENCE = "http://127.0.0.1:9/mcp"


@dataclass
class Issuer:
    """An issuer that serves discovery and a JWKS it can change, counting JWKS reads."""

    url: str = ""
    keys: list[dict[str, Any]] = field(default_factory=list)
    jwks_reads: int = 0
    stall: asyncio.Event | None = None

    def publish(self, key: Any, kid: str) -> None:
        jwk = json.loads(jwt.algorithms.get_default_algorithms()["RS256"].to_jwk(key.public_key()))
        self.keys = [{**jwk, "kid": kid, "use": "sig", "alg": "RS256"}]

    def token(self, key: Any, kid: str, **claims: Any) -> str:
        body = {"iss": self.url, "aud": AUDIENCE, "sub": "alice", "exp": 4102444800, **claims}
        return jwt.encode(body, key, algorithm="RS256", headers={"kid": kid})


@pytest.fixture
async def issuer() -> AsyncIterator[Issuer]:
    state = Issuer()

    async def discovery(request: web.Request) -> web.Response:
        return web.json_response({"issuer": state.url, "jwks_uri": f"{state.url}/jwks"})

    async def jwks(request: web.Request) -> web.Response:
        state.jwks_reads += 1
        if state.stall is not None:
            await state.stall.wait()
        return web.json_response({"keys": state.keys})

    app = web.Application()
    app.router.add_get("/.well-known/openid-configuration", discovery)
    app.router.add_get("/jwks", jwks)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    state.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield state
    finally:
        if state.stall is not None:
            state.stall.set()
        await runner.cleanup()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as http:
        yield http


def verifier(issuer: Issuer, session: aiohttp.ClientSession, **settings: Any) -> OidcVerifier:
    return OidcVerifier(AuthSettings(oidc_issuer=(issuer.url,), **settings), lambda: session)


async def verify(oidc: OidcVerifier, token: str) -> Any:
    return await oidc.verify(token, jwt.get_unverified_header(token), next(iter(oidc.issuers)), AUDIENCE)


async def test_keys_are_cached_and_an_unknown_kid_refetches_them_at_most_once_per_interval(
    issuer: Issuer, session: aiohttp.ClientSession
) -> None:
    """Our choice (issue 22): refetch on an unknown `kid`, rate-limited so made-up kids cannot hammer the issuer."""
    first, second = (rsa.generate_private_key(public_exponent=65537, key_size=2048) for _ in range(2))
    issuer.publish(first, "k1")
    oidc = verifier(issuer, session, oidc_jwks_refresh_min_s=3600.0)
    for _ in range(3):
        assert (await verify(oidc, issuer.token(first, "k1"))).owner.subject == "alice"
    assert issuer.jwks_reads == 1
    issuer.publish(second, "k2")
    for _ in range(3):
        with pytest.raises(Refused) as refused:
            await verify(oidc, issuer.token(second, "k2"))
        assert refused.value.reason == "unknown_key"
    assert issuer.jwks_reads == 1  # inside the interval: no refetch

    eager = verifier(issuer, session, oidc_jwks_refresh_min_s=0.0)
    issuer.publish(first, "k1")
    await verify(eager, issuer.token(first, "k1"))
    issuer.publish(second, "k2")
    assert (await verify(eager, issuer.token(second, "k2"))).issuer == issuer.url
    assert issuer.jwks_reads == 3


async def test_an_issuer_that_does_not_answer_is_a_refusal_within_the_deadline(
    issuer: Issuer, session: aiohttp.ClientSession
) -> None:
    """CONVENTIONS.md §Async: every network call has a deadline; the caller gets 503 (`issuer_unavailable`)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    issuer.publish(key, "k1")
    issuer.stall = asyncio.Event()
    oidc = verifier(issuer, session, oidc_fetch_timeout_s=0.2)
    async with asyncio.timeout(5):
        with pytest.raises(Refused) as refused:
            await verify(oidc, issuer.token(key, "k1"))
    assert refused.value.reason == "issuer_unavailable" and refused.value.http_status == 503


async def test_only_asymmetric_algorithms_and_keys_published_for_them_are_accepted(
    issuer: Issuer, session: aiohttp.ClientSession
) -> None:
    """RFC 8725 §3.1-3.2: the algorithm is fixed by the key, never chosen by the token; no `none`, no HMAC."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    issuer.publish(key, "k1")
    oidc = verifier(issuer, session)
    for alg in ("none", "HS256", "HS512", None):
        header = {"alg": alg, "kid": "k1"} if alg else {"kid": "k1"}
        with pytest.raises(Refused) as refused:
            await oidc.verify("x.y.z", header, issuer.url, AUDIENCE)
        assert refused.value.reason == "bad_algorithm"
    ps256 = jwt.encode({"iss": issuer.url, "aud": AUDIENCE, "sub": "a", "exp": 4102444800}, key, "PS256", {"kid": "k1"})
    with pytest.raises(Refused) as refused:  # the JWK says RS256
        await verify(oidc, ps256)
    assert refused.value.reason == "unknown_key"
    es = ec.generate_private_key(ec.SECP256R1())
    es256 = jwt.encode({"iss": issuer.url, "aud": AUDIENCE, "sub": "a", "exp": 4102444800}, es, "ES256", {"kid": "k1"})
    with pytest.raises(Refused):
        await verify(oidc, es256)


async def test_claims_map_to_the_principal_and_a_missing_one_is_refused(
    issuer: Issuer, session: aiohttp.ClientSession
) -> None:
    """`oidc_tenant_claim` / `oidc_subject_claim`; scopes from `scope` and `scp`."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    issuer.publish(key, "k1")
    oidc = verifier(issuer, session, oidc_tenant_claim="org", oidc_subject_claim="email")
    identity = await verify(oidc, issuer.token(key, "k1", org="acme", email="a@acme", scope="a b", scp=["c"]))
    assert (identity.owner.tenant, identity.owner.subject) == ("acme", "a@acme")
    assert identity.scopes == frozenset({"a", "b", "c"})
    with pytest.raises(Refused) as refused:
        await verify(oidc, issuer.token(key, "k1", email="a@acme"))
    assert refused.value.reason == "missing_claim"
    with pytest.raises(Refused) as refused:
        await verify(oidc, issuer.token(key, "k1", org="acme", email="a@acme", aud=[AUDIENCE + "/other"]))
    assert refused.value.reason == "wrong_audience"


def test_issuer_urls_must_be_https_unless_on_loopback() -> None:
    for good in ("https://idp.example", "http://127.0.0.1:4444", "http://localhost:1/x", "http://[::1]:8/"):
        check_issuer_url(good)
    for bad in ("http://idp.example", "http://10.0.0.1", "ftp://idp.example", "idp.example", "https://"):
        with pytest.raises(ValueError):
            check_issuer_url(bad)


def test_settings_refuse_an_oidc_server_off_loopback_without_a_resource_uri() -> None:
    """RFC 8707: the audience must be known; a `Host` header off loopback is not trusted to say it."""
    public = ServeSettings(host="0.0.0.0", tools_dirs=(Path("."),))
    with pytest.raises(SettingsError, match="MCPTASKS_RESOURCE_URI"):
        validate(Settings(serve=public, auth=AuthSettings(oidc_issuer=("https://idp.example",))))
    with pytest.raises(SettingsError, match="MCPTASKS_OIDC_ISSUER"):
        validate(Settings(serve=public, auth=AuthSettings(oidc_issuer=("http://idp.example",))))
    ok = AuthSettings(oidc_issuer=("https://idp.example",), resource_uri="https://mcp.example/mcp")
    assert validate(Settings(serve=public, auth=ok)).auth == ok


def test_challenges_name_the_metadata_and_never_carry_quotes() -> None:
    """RFC 9728 §3.1 (well-known before the path) and §5.1; RFC 6750 §3 (no `"` or `\\` in values)."""
    assert metadata.metadata_url("https://mcp.example/team/mcp") == (
        "https://mcp.example/.well-known/oauth-protected-resource/team/mcp"
    )
    value = metadata.challenge("https://h/mcp", error="insufficient_scope", description='a "b"\\', scope=["y", "x"])
    assert value == (
        'Bearer resource_metadata="https://h/.well-known/oauth-protected-resource/mcp", '
        'error="insufficient_scope", error_description="a b", scope="x y"'
    )


async def test_a_stale_cache_is_refreshed_once_for_concurrent_requests(
    issuer: Issuer, session: aiohttp.ClientSession
) -> None:
    """One lock per issuer: requests that miss together share one fetch."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    issuer.publish(key, "k1")
    keys = IssuerKeys(issuer.url, lambda: session, AuthSettings(oidc_issuer=(issuer.url,)))
    await asyncio.gather(*(keys.key("k1", "RS256") for _ in range(10)))
    assert issuer.jwks_reads == 1
