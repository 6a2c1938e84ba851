"""Authentication: bearer tokens → `Owner(tenant, subject, "static")`, from a YAML token file.

Token file format (`--tokens FILE`):

    tokens:
      - token: "s3cr3t-alice"        # the bearer token, as sent in `Authorization: Bearer ...`
        tenant: acme
        subject: alice

Without a token file the server serves one local principal and binds loopback only (enforced in
`cli`). Tokens are compared by SHA-256 digest in constant time; they are never logged.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

import yaml

from mcp_tasks.tasks.owner import LOCAL_OWNER, STATIC_ISSUER, Owner


class Unauthenticated(Exception):
    """The request carries no valid bearer token (HTTP 401)."""


class Authenticator(Protocol):
    """Maps a request's headers to its principal."""

    def authenticate(self, headers: Mapping[str, str]) -> Owner:
        """Return the principal, or raise `Unauthenticated`."""
        ...


class LocalAuthenticator:
    """Everyone is the single local principal (loopback-only servers without a token file)."""

    def authenticate(self, headers: Mapping[str, str]) -> Owner:
        """Return `LOCAL_OWNER`."""
        return LOCAL_OWNER


class TokenFileAuthenticator:
    """Bearer tokens from a YAML file.

    Raises:
        ValueError: at construction, when the file is unreadable or malformed, or repeats a token
            (the message names the file and the entry).
    """

    def __init__(self, path: Path) -> None:
        try:
            document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise ValueError(f"{path}: cannot read the token file: {exc}") from exc
        entries = document.get("tokens") if isinstance(document, dict) else None
        if not isinstance(entries, list) or not entries:
            raise ValueError(f"{path}: expected a top-level 'tokens:' list of {{token, tenant, subject}}")
        self._owners: dict[bytes, Owner] = {}
        for index, entry in enumerate(entries):
            fields = ("token", "tenant", "subject")
            if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) and entry[k] for k in fields):
                raise ValueError(f"{path}: tokens[{index}] needs non-empty string token, tenant and subject")
            digest = hashlib.sha256(entry["token"].encode()).digest()
            if digest in self._owners:
                raise ValueError(f"{path}: tokens[{index}] repeats an earlier token; every token must be unique")
            self._owners[digest] = Owner(entry["tenant"], entry["subject"], STATIC_ISSUER)

    def authenticate(self, headers: Mapping[str, str]) -> Owner:
        """Resolve `Authorization: Bearer <token>`."""
        value = headers.get("Authorization", "")
        scheme, _, token = value.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated("send Authorization: Bearer <token>")
        # surrogateescape: header bytes that are not UTF-8 (aiohttp passes them as surrogates) just fail to match
        digest = hashlib.sha256(token.strip().encode("utf-8", "surrogateescape")).digest()
        for known, owner in self._owners.items():
            if hmac.compare_digest(known, digest):
                return owner
        raise Unauthenticated("unknown bearer token")
