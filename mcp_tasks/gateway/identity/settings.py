"""Settings of request authentication beyond the static token file (group `auth` of `Settings`).

Read by `cli` (validated there) and handed to `identity.gate.build`; nothing here reads the environment.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class AuthSettings:
    """Who may call the MCP endpoint: OpenID Connect access tokens, Kubernetes ServiceAccount tokens.

    Any combination of these and the static token file (`tokens_file`) may be on at once. With none of
    them configured, a loopback server serves its one local principal; with any, every request
    authenticates, loopback included.

    Attributes:
        resource_uri: the canonical URI of this MCP server, as clients reach it (RFC 9728 `resource`,
            RFC 8707 resource indicator), e.g. `https://mcp.example.com/mcp`. Default none: derived from
            each request's `Host` (`http://HOST/mcp`), which only a loopback server may do when tokens
            are checked for their audience. Set it behind a proxy or TLS terminator.
        oidc_issuer: issuers whose JWT access tokens are accepted, comma-separated (default none: off).
            Each must be `https://`, or `http://` on a loopback address (for tests); its keys come from its
            discovery document (`/.well-known/openid-configuration`, else RFC 8414) and JWKS.
        oidc_audience: the `aud` a token must carry (default none: `resource_uri`). A token issued for
            any other resource is refused (RFC 8707; tokens are never passed through).
        oidc_tenant_claim: claim holding the principal's tenant (default none: the tenant is the issuer
            URL, one tenant per issuer). A token without the claim is refused.
        oidc_subject_claim: claim holding the principal's subject (default `sub`).
        oidc_leeway_s: clock skew allowed on `exp`, `nbf` and `iat`, in seconds (default 30).
        oidc_fetch_timeout_s: deadline of one discovery or JWKS fetch, in seconds (default 5).
        oidc_jwks_max_age_s: how long fetched keys are used before they are fetched again, in seconds
            (default 3600).
        oidc_jwks_refresh_min_s: a token signed by a key not in the cached JWKS makes the keys be fetched
            again at most this often per issuer, in seconds (default 10: a stream of tokens with made-up
            `kid`s cannot make the gateway hammer the issuer).
        service_account_tokens: accept Kubernetes ServiceAccount tokens, checked by a `TokenReview`
            (`mcptasks gateway` only; default false). The principal is the namespace (tenant) and the
            ServiceAccount's name (subject).
        service_account_audience: the audience such a token must be issued for (default none:
            `resource_uri`, else `mcp-tasks-gateway`); a token for another audience is refused.
        legacy_owner_issuer: who vouched for the owners of tasks stored before owners named their issuer
            (an upgrade from an earlier version): `static`, `kubernetes`, `local` or one of `oidc_issuer`.
            Default none: the one mechanism configured when there is exactly one; with several, such tasks
            are readable by nobody until this names the one that created them (docs/security.md, Owners).
        issuer_tenants: which tenants an issuer may vouch for, comma-separated `ISSUER=TENANT_PATTERN`
            entries (`identity.tenants`): the issuer is `kubernetes`, `static` or one of `oidc_issuer`, the
            pattern shell-style (`team-*`); an issuer may repeat. Default none: every issuer may vouch for
            any tenant. A token naming a tenant its issuer may not vouch for is refused (403
            `tenant_not_allowed`, with an audit line). Set it when an issuer's tenant comes from a claim
            (`oidc_tenant_claim`) or ServiceAccount namespaces are tenants.
    """

    resource_uri: str | None = None
    oidc_issuer: tuple[str, ...] = ()
    oidc_audience: str | None = None
    oidc_tenant_claim: str | None = None
    oidc_subject_claim: str = "sub"
    oidc_leeway_s: float = 30.0
    oidc_fetch_timeout_s: float = 5.0
    oidc_jwks_max_age_s: float = 3600.0
    oidc_jwks_refresh_min_s: float = 10.0
    service_account_tokens: bool = False
    service_account_audience: str | None = None
    legacy_owner_issuer: str | None = None
    issuer_tenants: tuple[str, ...] = ()

    @property
    def configured(self) -> bool:
        """True when any token mechanism of this group is on."""
        return bool(self.oidc_issuer) or self.service_account_tokens
