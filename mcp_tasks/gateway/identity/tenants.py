"""Which tenants each issuer may vouch for (`MCPTASKS_ISSUER_TENANTS`, chart `auth.issuerTenants`).

An OIDC issuer whose tenant comes from a token claim (`MCPTASKS_OIDC_TENANT_CLAIM`) vouches for whatever
tenant its tokens name, and a Kubernetes ServiceAccount token names its namespace. Owners name their
issuer (`tasks.owner.Owner`), so no issuer can reach another's tasks; this policy limits, in addition,
which tenants' quotas, tool scopes and audit lines an issuer may speak for. An issuer without entries may
vouch for any tenant (as before this setting existed); an issuer with entries only for the tenants its
patterns match (shell-style: `team-*`). A token naming another tenant is refused with 403
`tenant_not_allowed` and an audit line (`gate.authenticate`).

Pure: parsed from the settings once, asked per request; nothing here does I/O.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class TenantPolicy:
    """Tenant patterns by issuer (`static`, `kubernetes` or an OIDC issuer URL).

    Attributes:
        patterns: issuer → the shell-style patterns of the tenants it may vouch for; an issuer not in
            the mapping may vouch for any tenant.
    """

    patterns: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def parse(cls, entries: Iterable[str]) -> TenantPolicy:
        """The policy of `ISSUER=PATTERN` entries (an issuer may repeat, its patterns add up).

        The issuer is everything before the last `=` (an issuer URL may hold one; a tenant pattern may not).

        Raises:
            ValueError: an entry without `=`, or with an empty issuer or pattern (the message names it).
        """
        patterns: dict[str, list[str]] = {}
        for entry in entries:
            issuer, sep, pattern = entry.rpartition("=")
            issuer, pattern = issuer.strip(), pattern.strip()
            if not sep or not issuer or not pattern:
                raise ValueError(
                    f"{entry!r} is not ISSUER=TENANT_PATTERN (e.g. https://idp.example.com=team-*, kubernetes=ns-a)"
                )
            patterns.setdefault(issuer, []).append(pattern)
        return cls(MappingProxyType({issuer: tuple(found) for issuer, found in patterns.items()}))

    def allows(self, issuer: str, tenant: str) -> bool:
        """True when `issuer` may vouch for `tenant` (always, for an issuer the policy does not list)."""
        allowed = self.patterns.get(issuer)
        return allowed is None or any(fnmatch.fnmatchcase(tenant, pattern) for pattern in allowed)

    def describe(self, issuer: str) -> str:
        """The tenants `issuer` may vouch for, for a refusal message (`team-a, team-*`)."""
        return ", ".join(self.patterns.get(issuer, ("any",)))
