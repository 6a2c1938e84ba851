"""The one place a request's bearer token becomes an `Identity`, or a `401` that says where to get one.

`transport.handle_post` calls `authenticate(request)` on the headers alone, before a byte of the body is
read. The token's shape selects the one mechanism tried: a JWT whose `iss` is a configured OIDC issuer
goes to `oidc`, another JWT to the ServiceAccount `TokenReview` when that is on, anything else to the
static token file; a JWT never falls through to the static table. With no mechanism configured the
request is the single local principal (a loopback server, `make run`); with any, every request
authenticates, loopback included.

A refusal is an HTTP answer, not a JSON-RPC 500: `401` with `WWW-Authenticate: Bearer resource_metadata=…`
(and `error="invalid_token"` when a token was sent), or `503` when the token's issuer cannot be asked.
Each refusal is counted by its bounded reason. Never logs a token.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Final, Protocol

import aiohttp
import jwt
from aiohttp import web

from mcp_tasks.gateway.auth import Authenticator, LocalAuthenticator, Unauthenticated
from mcp_tasks.gateway.identity import audit, metadata, scopes
from mcp_tasks.gateway.identity.oidc import OidcVerifier
from mcp_tasks.gateway.identity.principal import IDENTITY_KEY, TOOL_KEY, Identity, Refused
from mcp_tasks.gateway.identity.settings import AuthSettings
from mcp_tasks.gateway.identity.tenants import TenantPolicy
from mcp_tasks.gateway.responses import json_response
from mcp_tasks.observability import metrics
from mcp_tasks.protocol.errors import InvalidRequest
from mcp_tasks.protocol.jsonrpc import RequestId, error_response
from mcp_tasks.tasks.interfaces import ToolCatalog
from mcp_tasks.tasks.owner import LOCAL_OWNER

logger = logging.getLogger("mcp_tasks.gateway.identity")

_JWT_SHAPE: Final = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")
"""Three base64url segments (RFC 7515 compact serialisation; the third is empty for `alg: none`)."""

SERVICE_ACCOUNT_AUDIENCE: Final = "mcp-tasks-gateway"
"""Audience a ServiceAccount token must carry when neither it nor the resource URI is configured."""

RETRY_AFTER_S: Final = 5
"""`Retry-After` of a `503` answered while a token's issuer cannot be reached, in seconds."""


class TokenReviewer(Protocol):
    """Checks a Kubernetes ServiceAccount token (a `TokenReview`; wired by `cli` for `mcptasks gateway`)."""

    async def review(self, token: str, audience: str) -> Identity:
        """The principal of `token` if the API server accepts it for `audience`; else raise `Refused`."""
        ...


class Gate:
    """Every configured authentication mechanism, and the protected resource they guard.

    Args:
        settings: the `auth` settings group (OIDC issuers, ServiceAccount tokens, resource URI).
        static: the static token file's authenticator, if a token file is configured.
        service_accounts: the `TokenReview` client, if ServiceAccount tokens are on.
        resource_name: `resource_name` of the metadata (the server's name).
        mcp_path: path of the MCP endpoint (the protected resource).
    """

    def __init__(
        self,
        settings: AuthSettings,
        static: Authenticator | None = None,
        service_accounts: TokenReviewer | None = None,
        *,
        resource_name: str = "mcp-tasks",
        mcp_path: str = "/mcp",
    ) -> None:
        self.settings = settings
        self.static = static
        self.service_accounts = service_accounts
        self.resource_name = resource_name
        self.mcp_path = mcp_path
        self.catalog: ToolCatalog | None = None  # set by `install`: the tools whose scopes are checked
        self._session: aiohttp.ClientSession | None = None
        self.oidc = OidcVerifier(settings, self._http) if settings.oidc_issuer else None
        self.tenants = TenantPolicy.parse(settings.issuer_tenants)

    @property
    def configured(self) -> bool:
        """True when any mechanism is on (then every request must authenticate)."""
        return self.static is not None or self.oidc is not None or self.service_accounts is not None

    def _http(self) -> aiohttp.ClientSession:
        """The client session for issuer documents, opened on first use (inside the running loop)."""
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(raise_for_status=False)
        return self._session

    async def aclose(self) -> None:
        """Close the client session (app cleanup)."""
        if self._session is not None:
            await self._session.close()

    def resource(self, request: web.BaseRequest) -> str:
        """The canonical URI of the protected resource, as this request reached it unless configured."""
        return metadata.resource_uri(request, self.settings.resource_uri, self.mcp_path)

    async def identify(self, request: web.BaseRequest) -> Identity:
        """The principal of `request`, from its `Authorization` header alone.

        Raises:
            Refused: no, several, or a refused bearer token; its issuer may not vouch for the tenant it
                names (`tenant_not_allowed`, 403); or its issuer cannot be asked.
        """
        identity = await self._mechanism(request)
        owner = identity.owner
        if not self.tenants.allows(owner.issuer, owner.tenant):
            raise Refused(
                "tenant_not_allowed",
                f"Forbidden: the issuer {owner.issuer} may not vouch for tenant {owner.tenant!r} here (it may for: "
                f"{self.tenants.describe(owner.issuer)}); use a token of an issuer that serves that tenant",
                issuer=owner.issuer,
                subject=owner.subject,
                identity=identity,
            )
        return identity

    async def _mechanism(self, request: web.BaseRequest) -> Identity:
        """The principal the one mechanism the token's shape selects accepts (see the module docstring)."""
        if not self.configured:
            return Identity(LOCAL_OWNER, "local")
        values = request.headers.getall("Authorization", [])
        if not values:
            raise Refused("missing_token", "send Authorization: Bearer <token>", token_sent=False)
        if len(set(values)) > 1:  # `transport` answers this first (400); never pick one of them here
            raise Refused("malformed_token", "send one Authorization header")
        scheme, _, token = values[0].partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Refused("missing_token", "send Authorization: Bearer <token>", token_sent=False)
        if (self.oidc is not None or self.service_accounts is not None) and _JWT_SHAPE.fullmatch(token):
            return await self._jwt(request, token)
        if self.static is not None:
            try:
                owner = self.static.authenticate(request.headers)
            except Unauthenticated as exc:
                raise Refused("invalid_token", "unknown bearer token") from exc
            return Identity(owner, "static")
        raise Refused("malformed_token", "the bearer token is not a JWT")

    async def _jwt(self, request: web.BaseRequest, token: str) -> Identity:
        try:
            header: dict[str, Any] = jwt.get_unverified_header(token)
            claims: dict[str, Any] = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError as exc:
            raise Refused("malformed_token", "the bearer token is not a well-formed JWT") from exc
        issuer = claims.get("iss")
        try:
            if self.oidc is not None and isinstance(issuer, str) and issuer in self.oidc.issuers:
                audience = self.settings.oidc_audience or self.resource(request)
                return await self.oidc.verify(token, header, issuer, audience)
            if self.service_accounts is not None:
                audience = (
                    self.settings.service_account_audience or self.settings.resource_uri or SERVICE_ACCOUNT_AUDIENCE
                )
                return await self.service_accounts.review(token, audience)
            raise Refused("unknown_issuer", "the token's issuer is not trusted here")
        except Refused as refused:  # what the token claimed, for the operator's log line (never the token)
            subject = claims.get(self.settings.oidc_subject_claim)
            refused.issuer = refused.issuer or (issuer if isinstance(issuer, str) else None)
            refused.subject = refused.subject or (subject if isinstance(subject, str) else None)
            raise

    def scope_refusal(
        self, request: web.BaseRequest, identity: Identity, tool_name: object, request_id: RequestId | None = None
    ) -> web.Response | None:
        """`403 insufficient_scope` when `identity` lacks a scope `tool_name` requires, else None."""
        if isinstance(tool_name, str):
            request[TOOL_KEY] = tool_name  # the body's name, once parsed, wins over the header for the audit
        if self.catalog is None:
            return None
        needed = scopes.missing(self.catalog, identity, tool_name)
        if not needed:
            return None
        metrics.AUTH_REFUSALS.labels("insufficient_scope").inc()
        message = f"Forbidden: tool {tool_name} needs the scopes {' '.join(sorted(needed))}; request a token with them"
        response = json_response(error_response(request_id, InvalidRequest(message)), 403)
        response.headers["WWW-Authenticate"] = metadata.challenge(
            self.resource(request), error="insufficient_scope", description="the token lacks a scope", scope=needed
        )
        response.force_close()  # the body may not have been read
        return response

    def refusal(self, request: web.BaseRequest, refused: Refused) -> web.Response:
        """The HTTP answer to a refused request: `401` + challenge, `403` (a tenant its issuer may not vouch
        for: no token of this issuer would do), or `503` + `Retry-After`.
        """
        message = str(refused) if refused.http_status == 403 else f"Unauthorized: {refused}"
        response = json_response(error_response(None, InvalidRequest(message)), refused.http_status)
        if refused.http_status == 503:
            response.headers["Retry-After"] = str(RETRY_AFTER_S)
        elif refused.http_status == 401:  # a 403 has no challenge: another token of this issuer would not do
            error = "invalid_token" if refused.token_sent else None
            description = str(refused) if refused.token_sent else None
            response.headers["WWW-Authenticate"] = metadata.challenge(
                self.resource(request), error=error, description=description
            )
        response.force_close()  # the body was never read: do not reuse the connection
        return response

    async def metadata_document(self, request: web.Request) -> web.Response:
        """`GET /.well-known/oauth-protected-resource[/mcp]` (RFC 9728 §3)."""
        supported = scopes.all_scopes(self.catalog) if self.catalog is not None else frozenset()
        body = metadata.document(self.resource(request), self.settings.oidc_issuer, supported, self.resource_name)
        # public and readable from browser-based clients (the Inspector); it holds nothing secret
        headers = {"Access-Control-Allow-Origin": "*", "Cache-Control": "public, max-age=300"}
        return web.json_response(body, headers=headers)


GATE_KEY: Final = web.AppKey("identity_gate", Gate)


def refuse_scope(
    request: web.Request, identity: Identity, tool_name: object, request_id: RequestId | None = None
) -> web.Response | None:
    """The `403` for a `tools/call` of `tool_name` by `identity` without its scopes, else None (see `scopes`)."""
    return request.app[GATE_KEY].scope_refusal(request, identity, tool_name, request_id)


async def authenticate(request: web.Request) -> Identity | web.Response:
    """The request's identity (also left in `request[IDENTITY_KEY]`), or the response that refuses it."""
    gate = request.app[GATE_KEY]
    try:
        identity = await gate.identify(request)
    except Refused as refused:
        metrics.AUTH_REFUSALS.labels(refused.reason).inc()
        if refused.reason == "issuer_unavailable":
            logger.warning(
                "a token of issuer %s could not be checked: the issuer did not answer", _claimed(refused.issuer)
            )
        elif refused.reason != "missing_token":  # a client's first, token-less request is routine
            logger.info(  # the message never holds the token; issuer and subject are what it claimed
                "refused a token (%s) of issuer %s for subject %s: %s",
                refused.reason,
                _claimed(refused.issuer),
                _claimed(refused.subject),
                refused,
                extra={"reason": refused.reason},
            )
        if refused.identity is not None:
            audit.refused(request, refused.identity, refused.reason)
        return gate.refusal(request, refused)
    request[IDENTITY_KEY] = identity
    return identity


MAX_CLAIMED_CHARS: Final = 128
"""Longest issuer or subject a refusal's log line repeats (they are shorter; a forged token may hold more)."""


def _claimed(value: str | None) -> str:
    """A claimed issuer or subject for a log line: quoted with escapes (a forged one is any string), bounded."""
    return "(none)" if value is None else repr(value[:MAX_CLAIMED_CHARS])


def install(app: web.Application, gate: Gate, catalog: ToolCatalog) -> None:
    """Serve the metadata routes, write the audit trail, check `catalog`'s tool scopes, and close the gate's
    client session with the app.
    """
    app[GATE_KEY] = gate
    gate.catalog = catalog
    app.middlewares.append(audit.middleware)
    for path in (metadata.METADATA_PATH, metadata.METADATA_PATH + gate.mcp_path):
        app.router.add_get(path, gate.metadata_document)

    async def close(app: web.Application) -> None:
        await gate.aclose()

    app.on_cleanup.append(close)


def gate_for(authenticator: Authenticator | Gate, resource_name: str, mcp_path: str) -> Gate:
    """`authenticator` as a `Gate`: a `LocalAuthenticator` is the unconfigured gate, another the static one."""
    if isinstance(authenticator, Gate):
        return authenticator
    static = None if isinstance(authenticator, LocalAuthenticator) else authenticator
    return Gate(AuthSettings(), static, resource_name=resource_name, mcp_path=mcp_path)
