"""Warm-call credentials, the executor's side: mint the signed token each warm call, re-attach and cancel carries.

A warm worker (`runtime.serve`) takes a request only with a credential it verifies with the executor's
public key (`runtime.call_auth`; format in `contract.PATH_CALLS`). `WarmCallSigner` holds the Ed25519
private key and mints one short-lived credential per request, bound to the tool (audience), the call
(execution id), the operation, the caller (a digest of the principal) and, for a call, the exact body.
Held by whoever sends warm calls: the embedded runner; on Kubernetes the operator (tasks) and the gateways
(synchronous calls). The key is never the gateways' request-state key. Nothing here logs a token or key.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from typing import Final

import jwt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
    load_pem_private_key,
)

from mcp_tasks.runtime import call_auth, contract
from mcp_tasks.tasks.owner import Owner

LIFETIME_S: Final = 120
"""Lifetime of one credential, in seconds: enough for the request to reach the worker, which checks it
before it starts the call (a long call's later re-attach or cancel gets a fresh one)."""
_NO_PRINCIPAL: Final = "executor"


def new_private_pem() -> bytes:
    """A fresh Ed25519 private key, PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`, what Helm's
    `genPrivateKey "ed25519"` writes too).
    """
    return Ed25519PrivateKey.generate().private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())


def caller_of(owner: Owner | None) -> str:
    """The `sub` of a credential: an opaque digest of the principal (tenant, subject and issuer; 32 hex characters),
    so the worker can tell callers apart without learning who they are; `executor` when there is none.
    """
    if owner is None:
        return _NO_PRINCIPAL
    return hashlib.sha256(f"{owner.tenant}\x00{owner.subject}\x00{owner.issuer}".encode()).hexdigest()[:32]


class WarmCallSigner:
    """Mints warm-call credentials with one Ed25519 private key.

    Args:
        private_key: the executor's key.
    """

    def __init__(self, private_key: Ed25519PrivateKey) -> None:
        self._key = private_key
        self.public_pem = (
            private_key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo).decode("ascii")
        )
        """The public key warm workers check with (`contract.ENV_SERVE_CALL_KEY`); not a secret."""

    @classmethod
    def from_pem(cls, pem: bytes) -> WarmCallSigner:
        """The signer of a PKCS#8 PEM Ed25519 private key.

        Raises:
            ValueError: the text is not an unencrypted Ed25519 private key in PEM.
        """
        try:
            key = load_pem_private_key(pem, password=None)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"not a PEM private key: {type(exc).__name__}") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise ValueError("the warm-call key must be an Ed25519 private key")
        return cls(key)

    def worker_tokens_key(self) -> bytes:
        """A 32-byte HMAC key derived from this key, for the worker-API tokens of the operator's warm calls
        (`runner.tokens.WorkerTokens`): the same in every replica that holds the key, and unrelated to the
        gateways' request-state key.
        """
        raw = self._key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        return hmac.new(raw, b"mcp-tasks warm worker tokens", hashlib.sha256).digest()

    def mint(
        self,
        tool: str,
        execution_id: str,
        operation: str,
        caller: str,
        body: bytes | None = None,
        now_s: float | None = None,
        lifetime_s: float = LIFETIME_S,
    ) -> str:
        """One credential (a JWT, EdDSA; claims in `contract.PATH_CALLS`).

        Args:
            tool: the tool whose workers may take it (the audience).
            execution_id: the call it addresses.
            operation: `call`, `reattach` or `cancel` (`contract.CALL_OPERATIONS`).
            caller: the principal's digest (`caller_of`).
            body: the exact request body of a `call` (its SHA-256 is bound into the credential).
            now_s: issue time, wall-clock seconds (default: now; a test mints expired ones).
            lifetime_s: seconds from `now_s` until it expires.
        """
        issued = time.time() if now_s is None else now_s
        claims: dict[str, object] = {
            "aud": contract.CALL_AUDIENCE_PREFIX + tool,
            "iat": int(issued),
            "exp": int(issued + lifetime_s),
            "jti": secrets.token_urlsafe(16),
            "sub": caller,
            "op": operation,
            "executionId": execution_id,
        }
        if body is not None:
            claims["bodySha256"] = hashlib.sha256(body).hexdigest()
        return jwt.encode(claims, self._key, algorithm=call_auth.ALGORITHM)


@dataclass(frozen=True, slots=True)
class CallAuth:
    """The credentials of one warm call: whom to mint for (tool, call, caller), and with which signer."""

    signer: WarmCallSigner
    tool: str
    execution_id: str
    caller: str

    def headers(self, operation: str, body: bytes | None = None) -> dict[str, str]:
        """The `Authorization` header of one request, with a credential minted now."""
        token = self.signer.mint(self.tool, self.execution_id, operation, self.caller, body)
        return {"Authorization": f"Bearer {token}"}
