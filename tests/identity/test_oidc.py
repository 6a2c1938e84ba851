"""OIDC access tokens from a real identity provider (ory hydra) on the embedded server, with real clients.

The MCP authorization specification (2025-11-25 and later, §Authorization) makes the server an OAuth 2.1
resource server: a `401` names its Protected Resource Metadata (RFC 9728), tokens are bound to the
resource (RFC 8707) and checked for signature, issuer, audience and lifetime.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import secrets
import time
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from mcp import Client
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.session import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from mcp_types import ElicitRequestParams, ElicitResult
from prometheus_client import REGISTRY

from mcp_tasks.client import TasksClientExtension
from mcp_tasks.protocol.models import GetTaskResult
from mcp_tasks.tasks.owner import Owner
from tests.conftest import Embedded, McpHttp, server_settings, serving, with_tokens
from tests.identity.conftest import oidc_server, trusting
from tests.identity.provider import Hydra, claims_of

METADATA = "/.well-known/oauth-protected-resource/mcp"


def base_of(server: Embedded) -> str:
    return server.url.removesuffix("/mcp")


def refusals(reason: str) -> float:
    return REGISTRY.get_sample_value("mcptasks_auth_refusals_total", {"reason": reason}) or 0.0


async def answer_luca(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
    return ElicitResult(action="accept", content={"input": "Luca", "name": "Luca"})


async def hello_world(transport: Any) -> tuple[str, str]:
    """Call `hello_world` as a task with the official SDK client: the greeting it ends with, and the task id."""
    seen: list[GetTaskResult] = []

    async def record(task: GetTaskResult) -> None:
        seen.append(task)

    async with Client(
        transport, extensions=[TasksClientExtension(on_update=record)], elicitation_callback=answer_luca, cache=None
    ) as client:
        result = await client.call_tool("hello_world", {})
    assert result.is_error is False
    assert seen, "hello_world ran as a task"
    return str(result.content[0].text), seen[-1].task_id  # type: ignore[union-attr]


async def owned_by(server: Embedded, task_id: str, owner: Owner) -> bool:
    """True when `owner` owns `task_id` (the store refuses another owner as if the task did not exist)."""
    return (await server.store.get(task_id, owner)).task_id == task_id


class MemoryTokens:
    """The SDK's `TokenStorage`, in memory, optionally holding a pre-registered client."""

    def __init__(self, client: OAuthClientInformationFull | None = None) -> None:
        self.tokens: OAuthToken | None = None
        self.client = client

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


def with_audience(request: httpx2.Request) -> httpx2.Request:
    """The token request with hydra's `audience` beside RFC 8707's `resource` (hydra ignores `resource`)."""
    form = dict(httpx2.QueryParams(request.content.decode()))
    form.setdefault("audience", form.get("resource", ""))
    headers = {k: v for k, v in request.headers.items() if k.lower() != "content-length"}
    return httpx2.Request(request.method, request.url, data=form, headers=headers)


class HydraClientCredentials(ClientCredentialsOAuthProvider):
    async def _exchange_token_client_credentials(self) -> httpx2.Request:
        return with_audience(await super()._exchange_token_client_credentials())


async def test_a_request_without_a_token_is_401_and_names_the_protected_resource_metadata(
    trusting_hydra: Embedded, hydra: Hydra, http_session: aiohttp.ClientSession
) -> None:
    """RFC 9728 §5.1 and MCP §Authorization: the `401` carries `resource_metadata`, which is served."""
    reply = await McpHttp(http_session, trusting_hydra.url).request("tools/list")
    assert reply.status == 401
    assert reply.headers["WWW-Authenticate"] == f'Bearer resource_metadata="{base_of(trusting_hydra)}{METADATA}"'
    assert reply.body["error"]["code"] == -32600
    for path in (METADATA, "/.well-known/oauth-protected-resource"):
        async with http_session.get(base_of(trusting_hydra) + path) as response:
            assert response.status == 200
            document = await response.json()
        assert document["resource"] == trusting_hydra.url
        assert document["authorization_servers"] == [hydra.issuer]
        assert document["bearer_methods_supported"] == ["header"]


async def test_a_client_credentials_token_calls_hello_world_through_the_sdk_client(
    trusting_hydra: Embedded, hydra: Hydra
) -> None:
    """A service's token (client credentials, `aud` = this server) is accepted; the task is the client's."""
    client_id = f"svc-{secrets.token_hex(4)}"
    secret = await hydra.create_client(client_id, audiences=[trusting_hydra.url])
    token = await hydra.client_credentials(client_id, secret, trusting_hydra.url)
    assert claims_of(token)["aud"] == [trusting_hydra.url]
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        greeting, task_id = await hello_world(streamable_http_client(trusting_hydra.url, http_client=http))
    assert greeting == "Hello, Luca!"
    assert await owned_by(trusting_hydra, task_id, Owner(hydra.issuer, client_id, hydra.issuer))


async def test_the_sdk_oauth_client_discovers_the_issuer_from_the_401_and_gets_a_token(
    trusting_hydra: Embedded, hydra: Hydra
) -> None:
    """The SDK's client-credentials provider: 401 → metadata → hydra's discovery → token → call."""
    client_id = f"svc-{secrets.token_hex(4)}"
    secret = await hydra.create_client(client_id, audiences=[trusting_hydra.url])
    storage = MemoryTokens()
    auth = HydraClientCredentials(trusting_hydra.url, storage, client_id, secret, issuer=hydra.issuer)
    async with httpx2.AsyncClient(auth=auth, timeout=30) as http:
        greeting, task_id = await hello_world(streamable_http_client(trusting_hydra.url, http_client=http))
    assert greeting == "Hello, Luca!"
    assert await owned_by(trusting_hydra, task_id, Owner(hydra.issuer, client_id, hydra.issuer))
    assert storage.tokens is not None
    assert claims_of(storage.tokens.access_token)["aud"] == [trusting_hydra.url]


async def test_the_sdk_oauth_client_completes_authorization_code_with_pkce_as_a_user(
    trusting_hydra: Embedded, hydra: Hydra
) -> None:
    """Authorization code + PKCE (OAuth 2.1 §4.1) with a pre-registered public client; the test plays the
    user (login and consent through hydra's admin API). The task is owned by the user, not the client."""
    client_id = f"app-{secrets.token_hex(4)}"
    redirect = "http://127.0.0.1:9/callback"
    await hydra.create_client(
        client_id,
        audiences=[trusting_hydra.url],
        scope="openid offline offline_access",  # the SDK asks for what the issuer lists
        grant_types=("authorization_code", "refresh_token"),
        redirect_uris=(redirect,),
        public=True,
    )
    registered = OAuthClientInformationFull(
        client_id=client_id,
        redirect_uris=[redirect],
        grant_types=["authorization_code"],
        response_types=["code"],
        token_endpoint_auth_method="none",
        scope="openid",
    )
    storage = MemoryTokens(registered)
    visited: list[str] = []

    async def redirect_handler(url: str) -> None:
        visited.append(url)

    async def callback_handler() -> AuthorizationCodeResult:
        code, state = await hydra.play_user(visited[-1], "carol", trusting_hydra.url)
        return AuthorizationCodeResult(code=code, state=state)

    metadata = OAuthClientMetadata(
        redirect_uris=[redirect],
        grant_types=["authorization_code"],
        response_types=["code"],
        token_endpoint_auth_method="none",
        scope="openid",
    )
    auth = OAuthClientProvider(trusting_hydra.url, metadata, storage, redirect_handler, callback_handler)
    async with httpx2.AsyncClient(auth=auth, timeout=30) as http:
        greeting, task_id = await hello_world(streamable_http_client(trusting_hydra.url, http_client=http))
    assert greeting == "Hello, Luca!"
    assert visited and "code_challenge=" in visited[0] and "code_challenge_method=S256" in visited[0]
    assert await owned_by(trusting_hydra, task_id, Owner(hydra.issuer, "carol", hydra.issuer))


async def test_two_subjects_of_one_issuer_cannot_see_each_others_tasks(
    trusting_hydra: Embedded, hydra: Hydra, http_session: aiohttp.ClientSession
) -> None:
    """ARCHITECTURE.md §Ownership with OIDC principals: `(issuer, sub)`; a foreign task is an unknown id."""
    tokens = []
    for name in ("alice", "bob"):
        client_id = f"{name}-{secrets.token_hex(4)}"
        secret = await hydra.create_client(client_id, audiences=[trusting_hydra.url])
        tokens.append(await hydra.client_credentials(client_id, secret, trusting_hydra.url))
    alice = McpHttp(http_session, trusting_hydra.url, token=tokens[0])
    bob = McpHttp(http_session, trusting_hydra.url, token=tokens[1])
    task_id = await alice.start_task("confirm_delete", {"filename": "secret.txt"})
    await alice.wait_status(task_id, "input_required")
    foreign, unknown = await bob.get(task_id), await bob.get("0" * 32)
    assert (foreign.status, foreign.error) == (unknown.status, unknown.error)
    assert (await bob.cancel(task_id)).error == (await bob.cancel("0" * 32)).error
    await alice.cancel(task_id)
    assert (await alice.wait_status(task_id, "cancelled"))["status"] == "cancelled"


def forged(header: dict[str, Any], claims: dict[str, Any]) -> str:
    """An unsigned JWT (`alg: none`) with `header` and `claims`."""

    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part(header)}.{part(claims)}."


async def test_refused_tokens_get_401_with_invalid_token_and_are_counted_by_reason(
    trusting_hydra: Embedded, hydra: Hydra, http_session: aiohttp.ClientSession
) -> None:
    """RFC 6750 §3.1 and RFC 8707: another audience, an unknown key, `alg: none`, HMAC with the public key
    as secret, a JWT of an unknown issuer and garbage each get 401 + `error="invalid_token"`, never a 500."""
    url = trusting_hydra.url
    client_id = f"svc-{secrets.token_hex(4)}"
    elsewhere = "http://127.0.0.1:1/mcp"
    secret = await hydra.create_client(client_id, audiences=[url, elsewhere])
    good = await hydra.client_credentials(client_id, secret, url)
    claims = claims_of(good)
    header = jwt.get_unverified_header(good)
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    async with http_session.get(f"{hydra.issuer}/.well-known/jwks.json") as response:
        public_jwk = next(key for key in (await response.json())["keys"] if key["kid"] == header["kid"])
    cases = {
        "wrong_audience": await hydra.client_credentials(client_id, secret, elsewhere),
        "unknown_key": jwt.encode(claims, stranger, algorithm="RS256", headers={"kid": "not-published"}),
        "bad_signature": jwt.encode(claims, stranger, algorithm="RS256", headers={"kid": header["kid"]}),
        "bad_algorithm": forged({"alg": "none", "kid": header["kid"]}, claims),
        "unknown_issuer": jwt.encode({**claims, "iss": "https://idp.example"}, stranger, algorithm="RS256"),
        "malformed_token": "not-a-token",
    }
    # the algorithm-confusion attack: HMAC keyed with the issuer's public key (what a naive verifier has)
    public_pem = jwt.PyJWK(public_jwk).key.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    unsigned = forged({"alg": "HS256", "kid": header["kid"], "typ": "JWT"}, claims)
    mac = hmac.new(public_pem, unsigned[:-1].encode(), hashlib.sha256).digest()
    hs256 = unsigned + base64.urlsafe_b64encode(mac).rstrip(b"=").decode()
    for reason, token in [*cases.items(), ("bad_algorithm", hs256), ("malformed_token", "a.b.c")]:
        before = refusals(reason)
        reply = await McpHttp(http_session, url, token=token).request("tools/list")
        assert reply.status == 401, (reason, reply.status, reply.body)
        challenge = reply.headers["WWW-Authenticate"]
        assert challenge.startswith(f'Bearer resource_metadata="{base_of(trusting_hydra)}{METADATA}"'), challenge
        assert 'error="invalid_token"' in challenge, (reason, challenge)
        assert refusals(reason) == before + 1, reason
        if reason == "wrong_audience":  # what the IdP must be asked for: this server's audience
            assert f"accepts tokens for '{url}'" in challenge, challenge
    assert (await McpHttp(http_session, url, token=good).request("tools/list")).status == 200


async def test_an_expired_token_is_refused(tmp_path: Path, hydra: Hydra, http_session: aiohttp.ClientSession) -> None:
    """`exp` is checked (RFC 7519 §4.1.4), here with no leeway so the wait for expiry stays short."""
    async with oidc_server(tmp_path, hydra.issuer, oidc_leeway_s=0.0) as server:
        client_id = f"svc-{secrets.token_hex(4)}"
        secret = await hydra.create_client(client_id, audiences=[server.url], access_token_lifespan="4s")
        token = await hydra.client_credentials(client_id, secret, server.url)
        mcp = McpHttp(http_session, server.url, token=token)
        assert (await mcp.request("tools/list")).status == 200
        before = refusals("expired")
        # not a synchronisation: the token's own clock has to pass its `exp` (4 s lifespan, same host clock)
        await asyncio.sleep(max(0.0, claims_of(token)["exp"] - time.time()) + 0.05)
        reply = await mcp.request("tools/list")
        assert reply.status == 401
        assert 'error="invalid_token"' in reply.headers["WWW-Authenticate"]
        assert refusals("expired") == before + 1


async def test_keys_of_a_restarted_issuer_are_followed(
    tmp_path: Path, hydra_path: Path, http_session: aiohttp.ClientSession
) -> None:
    """Key rotation: after the issuer restarts with new keys, its new tokens are accepted (the unknown `kid`
    refetches the JWKS) and tokens signed by the retired key are refused; an issuer that is down is a 503."""
    with Hydra(hydra_path, tmp_path / "hydra.log") as provider:
        async with oidc_server(tmp_path / "data", provider.issuer) as server:
            secret = await provider.create_client("rotating", audiences=[server.url])
            old = await provider.client_credentials("rotating", secret, server.url)
            assert (await McpHttp(http_session, server.url, token=old).request("tools/list")).status == 200
            provider.restart()
            secret = await provider.create_client("rotating", audiences=[server.url])
            new = await provider.client_credentials("rotating", secret, server.url)
            assert jwt.get_unverified_header(new)["kid"] != jwt.get_unverified_header(old)["kid"]
            assert (await McpHttp(http_session, server.url, token=new).request("tools/list")).status == 200
            assert (await McpHttp(http_session, server.url, token=old).request("tools/list")).status == 401
            provider.stop()
            unknown = jwt.encode(
                claims_of(new), rsa.generate_private_key(public_exponent=65537, key_size=2048), algorithm="RS256"
            )
            reply = await McpHttp(http_session, server.url, token=unknown).request("tools/list")
            assert reply.status == 503 and reply.headers["Retry-After"]


async def test_static_tokens_still_work_beside_oidc_and_a_jwt_never_reaches_the_static_table(
    tmp_path: Path, hydra: Hydra, http_session: aiohttp.ClientSession
) -> None:
    """Issue 22 §4: any combination of mechanisms; the token's shape picks the one that is tried."""
    settings = trusting(with_tokens(server_settings(tmp_path / "data"), tmp_path), hydra.issuer)
    async with serving(settings) as server:
        assert (await McpHttp(http_session, server.url, token="alice-token").request("tools/list")).status == 200
        assert (await McpHttp(http_session, server.url).request("tools/list")).status == 401
        lookalike = forged({"alg": "RS256"}, {"iss": hydra.issuer})
        reply = await McpHttp(http_session, server.url, token=lookalike).request("tools/list")
        assert reply.status == 401


async def test_an_issuer_limited_to_some_tenants_is_refused_for_a_token_naming_another(
    tmp_path: Path, hydra: Hydra, http_session: aiohttp.ClientSession
) -> None:
    """Issue 30 §1 with a real IdP: the tenant comes from a claim (`client_id`), and the issuer may vouch only
    for `team-*` (`MCPTASKS_ISSUER_TENANTS`). A client named outside the pattern gets 403 saying so; one
    inside it is served, its task owned by (its tenant, its subject, the issuer)."""
    rule = (f"{hydra.issuer}=team-*",)
    async with oidc_server(tmp_path, hydra.issuer, oidc_tenant_claim="client_id", issuer_tenants=rule) as server:
        tokens = {}
        for name in (f"team-{secrets.token_hex(4)}", f"svc-{secrets.token_hex(4)}"):
            secret = await hydra.create_client(name, audiences=[server.url])
            tokens[name] = await hydra.client_credentials(name, secret, server.url)
        inside, outside = tokens
        refused = await McpHttp(http_session, server.url, token=tokens[outside]).call_tool("greet", {"name": "Ada"})
        assert refused.status == 403, refused.body
        assert f"the issuer {hydra.issuer} may not vouch for tenant {outside!r}" in refused.body["error"]["message"]
        member = McpHttp(http_session, server.url, token=tokens[inside])
        task_id = await member.start_task("confirm_delete", {"filename": "a.txt"})
        assert await owned_by(server, task_id, Owner(inside, inside, hydra.issuer))
