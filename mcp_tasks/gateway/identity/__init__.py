"""Who is calling: OIDC access tokens, Kubernetes ServiceAccount tokens and static tokens, checked on the
headers before a body is read, and the OAuth Protected Resource Metadata (RFC 9728) clients discover
them from. `transport` calls `gate.authenticate`; `cli` builds the `Gate` from the `auth` settings.
"""

from mcp_tasks.gateway.identity.gate import Gate, TokenReviewer
from mcp_tasks.gateway.identity.principal import IDENTITY_KEY, Identity, Refused
from mcp_tasks.gateway.identity.settings import AuthSettings

__all__ = ["IDENTITY_KEY", "AuthSettings", "Gate", "Identity", "Refused", "TokenReviewer"]
