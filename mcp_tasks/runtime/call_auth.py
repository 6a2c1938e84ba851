"""Warm-call credentials, the worker's side: check the signed token every call, re-attach and cancel carries.

`runtime.serve` asks `CallVerifier` before it reads a call's body or touches a call in flight; only the
executor that started the worker holds the private key (`worker.warm_auth` mints), the worker holds the
public one (`contract.ENV_SERVE_CALL_KEY`), so a compromised tool process cannot mint calls for other
tools. The format is `contract.PATH_CALLS`'s (a JWT, EdDSA). This module never logs or echoes a token.

Uses PyJWT and `cryptography` (dependencies of mcp-tasks) besides the standard library; imported only
by a warm worker, never by a one-shot tool run.
"""

from __future__ import annotations

import hashlib
import heapq
import hmac
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import jwt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from mcp_tasks.runtime import contract

ALGORITHM: Final = "EdDSA"
LEEWAY_S: Final = 10.0
"""Clock skew tolerated between the minting executor and the worker, in seconds."""
_MAX_SEEN: Final = 65_536
"""Call credentials remembered at most until they expire (a replay of one is refused); past this many,
the soonest to expire go first."""
_PEM_END: Final = "-----END PUBLIC KEY-----"
_REQUIRED: Final = ["aud", "exp", "iat", "jti", "sub", "op", "executionId"]


@dataclass(frozen=True, slots=True)
class Grant:
    """What a verified credential allows: `operation` on call `execution_id`, for `caller` (opaque)."""

    caller: str
    execution_id: str
    operation: str
    jti: str
    expires_at: float
    """Wall-clock seconds (`exp`)."""
    body_sha256: str | None


def load_public_keys(pem: str) -> list[Ed25519PublicKey]:
    """Every Ed25519 public key in `pem` (one or more PEM blocks, concatenated).

    Raises:
        ValueError: no key, or a block that is not an Ed25519 public key.
    """
    keys: list[Ed25519PublicKey] = []
    for block in pem.split(_PEM_END):
        if not block.strip():
            continue
        key = load_pem_public_key((block.strip() + "\n" + _PEM_END + "\n").encode())
        if not isinstance(key, Ed25519PublicKey):
            raise ValueError("a warm-call key must be an Ed25519 public key (PEM)")
        keys.append(key)
    if not keys:
        raise ValueError("no public key given")
    return keys


class CallVerifier:
    """Checks warm-call credentials for the workers of tool `tool` (thread-safe).

    Args:
        public_keys: the executor's public key(s); a credential signed by any of them verifies.
        tool: the tool this worker serves (the credential's audience must name it).
    """

    def __init__(self, public_keys: list[Ed25519PublicKey], tool: str) -> None:
        self._keys = public_keys
        self.audience = contract.CALL_AUDIENCE_PREFIX + tool
        self._seen: set[str] = set()  # jti of calls taken and not yet expired
        self._expiry: list[tuple[float, str]] = []  # (exp, jti) of `_seen`, a min-heap: forgetting never scans
        self._lock = threading.Lock()

    @classmethod
    def from_environment(cls, environ: Mapping[str, str], tool: str) -> CallVerifier:
        """The verifier a warm worker builds at start (`ENV_SERVE_CALL_KEY` or `ENV_SERVE_CALL_KEY_FILE`).

        Raises:
            ValueError: neither variable is set, the file cannot be read, or the text holds no Ed25519 key.
        """
        text = environ.get(contract.ENV_SERVE_CALL_KEY, "")
        path = environ.get(contract.ENV_SERVE_CALL_KEY_FILE, "")
        if not text and path:
            try:
                text = Path(path).read_text(encoding="ascii")
            except (OSError, UnicodeDecodeError) as exc:
                raise ValueError(f"{contract.ENV_SERVE_CALL_KEY_FILE}: cannot read {path}: {exc}") from exc
        if not text:
            raise ValueError(
                f"{contract.ENV_SERVE_CALL_KEY} (or {contract.ENV_SERVE_CALL_KEY_FILE}) is not set: a warm worker "
                "takes calls only from the executor that started it, which sets it"
            )
        return cls(load_public_keys(text), tool)

    def verify(self, authorization: list[str], operation: str, execution_id: str | None) -> Grant | None:
        """The grant of the one `Authorization: Bearer` credential given, or `None` if it does not allow
        `operation` on `execution_id` (`None`: a call, whose id is in the body `bind` checks) for this tool.

        Args:
            authorization: every `Authorization` header of the request (two or more never verify).
            operation: one of `contract.CALL_OPERATIONS`.
            execution_id: the call the request addresses (re-attach, cancel).
        """
        if len(authorization) != 1:
            return None
        scheme, _, token = authorization[0].strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        claims = self._decode(token.strip())
        if claims is None:
            return None
        try:
            grant = Grant(
                caller=_text(claims["sub"]),
                execution_id=_text(claims["executionId"]),
                operation=_text(claims["op"]),
                jti=_text(claims["jti"]),
                expires_at=float(claims["exp"]),
                body_sha256=_text(claims["bodySha256"]) if "bodySha256" in claims else None,
            )
            lifetime = float(claims["exp"]) - float(claims["iat"])
        except (TypeError, ValueError):
            return None
        if grant.operation != operation or lifetime > contract.CALL_MAX_LIFETIME_S:
            return None
        if execution_id is not None and not hmac.compare_digest(grant.execution_id, execution_id):
            return None
        return grant

    def bind(self, grant: Grant, execution_id: str, body: bytes) -> bool:
        """Whether a call's `grant` was minted for this very body and call, the first time it is presented
        (a replay within its lifetime is refused). Records it as taken.

        The memory of taken credentials is ordered by expiry: each call forgets only what expired (each
        credential once), O(log n) whatever the load, never a scan of everything remembered.
        """
        if grant.operation != "call" or grant.body_sha256 is None:
            return False
        if not hmac.compare_digest(grant.execution_id, execution_id):
            return False
        if not hmac.compare_digest(grant.body_sha256, hashlib.sha256(body).hexdigest()):
            return False
        now = time.time()
        with self._lock:
            if grant.jti in self._seen:
                return False
            expiry = self._expiry
            while expiry and (expiry[0][0] + LEEWAY_S < now or len(expiry) >= _MAX_SEEN):
                self._seen.discard(heapq.heappop(expiry)[1])  # O(log n) per credential, once
            heapq.heappush(expiry, (grant.expires_at, grant.jti))
            self._seen.add(grant.jti)
        return True

    def _decode(self, token: str) -> dict[str, Any] | None:
        for key in self._keys:
            try:
                claims: dict[str, Any] = jwt.decode(
                    token,
                    key,
                    algorithms=[ALGORITHM],
                    audience=self.audience,
                    leeway=LEEWAY_S,
                    options={"require": _REQUIRED},
                )
            except jwt.InvalidSignatureError:
                continue  # perhaps the other key of a rotation
            except jwt.InvalidTokenError:
                return None
            return claims
        return None


def _text(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError("expected a non-empty string")
    return value
