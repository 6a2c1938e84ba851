"""OAuth 2.0 Protected Resource Metadata (RFC 9728) and the `WWW-Authenticate` challenges that point to it.

Served at `/.well-known/oauth-protected-resource` and at its path-suffixed form for the MCP endpoint
(`/.well-known/oauth-protected-resource/mcp`, RFC 9728 §3.1), by `mcptasks serve` and `mcptasks gateway`
alike (`gate.install`). Clients (the MCP SDKs, the Inspector) find it from a `401`'s
`resource_metadata` parameter (RFC 9728 §5.1; MCP authorization §Protected Resource Metadata), then the
authorization server, then a token for the `resource` named here. Never holds a secret.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final
from urllib.parse import urlsplit

from aiohttp import web

METADATA_PATH: Final = "/.well-known/oauth-protected-resource"


def resource_uri(request: web.BaseRequest, configured: str | None, mcp_path: str) -> str:
    """The canonical URI of this MCP server: `configured`, else derived from the request (`http://HOST/mcp`).

    Deriving is only trusted where the `Host` is checked (a loopback server; see `settings` and `cli`).
    """
    return configured or f"{request.scheme}://{request.host}{mcp_path}"


def metadata_url(resource: str) -> str:
    """Where the metadata of `resource` is published (RFC 9728 §3.1: well-known segment before the path)."""
    parts = urlsplit(resource)
    return f"{parts.scheme}://{parts.netloc}{METADATA_PATH}{parts.path.rstrip('/')}"


def _quoted(value: str) -> str:
    """An RFC 9110 quoted-string without quotes or backslashes to escape (RFC 6750 §3 forbids them anyway)."""
    return '"' + "".join(c for c in value if c not in '"\\' and 0x20 <= ord(c) < 0x7F) + '"'


def challenge(
    resource: str, *, error: str | None = None, description: str | None = None, scope: Iterable[str] = ()
) -> str:
    """A `WWW-Authenticate: Bearer ...` value (RFC 6750 §3, RFC 9728 §5.1).

    Args:
        resource: the canonical resource URI; its metadata URL becomes `resource_metadata`.
        error: `invalid_token` when a token was sent and refused, `insufficient_scope` for a 403.
        description: `error_description` for a person reading it (never a token or its claims).
        scope: the scopes needed (with `insufficient_scope`).
    """
    params = [f"resource_metadata={_quoted(metadata_url(resource))}"]
    if error is not None:
        params.append(f"error={_quoted(error)}")
    if description:
        params.append(f"error_description={_quoted(description)}")
    scopes = " ".join(sorted(scope))
    if scopes:
        params.append(f"scope={_quoted(scopes)}")
    return "Bearer " + ", ".join(params)


def document(
    resource: str, authorization_servers: Iterable[str], scopes: Iterable[str], resource_name: str
) -> dict[str, object]:
    """The metadata document (RFC 9728 §2): resource, its authorization servers, scopes, bearer methods."""
    body: dict[str, object] = {
        "resource": resource,
        "authorization_servers": list(authorization_servers),
        "bearer_methods_supported": ["header"],
        "resource_name": resource_name,
    }
    listed = sorted(set(scopes))
    if listed:
        body["scopes_supported"] = listed
    return body
