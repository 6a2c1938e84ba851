"""Warm-call credentials, the worker's side: open sessions with the executor, check each request's MAC.

`runtime.serve` asks `CallVerifier` before it reads a call's body or touches a call in flight. The scheme
(`contract.PATH_SESSIONS`, `contract.PATH_CALLS`) has two steps:

- **Session** (rare: once per executor process and worker, renewed hourly). The worker makes an X25519 key
  pair at start and publishes its public half (`worker_key`). An executor sends an offer signed with its
  Ed25519 warm-call key (a JWT, EdDSA) that names this worker's key, the tool and a fresh X25519 key of
  its own; both sides derive the session key from the two (HKDF-SHA256). Only a holder of the executor's
  private key can make an offer the worker accepts (it holds the public key only,
  `contract.ENV_SERVE_CALL_KEY`), and only this worker can derive the key an offer leads to: a session key
  authorizes nothing on another worker, and one seen on the wire in an offer reveals nothing.
- **Call** (every request): an HMAC-SHA256 with the session key over the operation, the call (execution
  id), the caller, the expiry, the session's counter and, for a call, the body's SHA-256. Each counter is
  taken once (a replay is refused); what is remembered per session is a fixed window of bits, so a check
  costs the same however many calls were taken, and sessions are forgotten in expiry order (a heap),
  never by a scan.

A tool running inside this worker could read its session keys, and so forge requests to this worker
only, which it already controls; it cannot make calls on any other worker or tool.

Uses PyJWT and `cryptography` (dependencies of mcp-tasks) besides the standard library; imported only by a
warm worker, never by a one-shot tool run. This module never logs or echoes a credential or key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import heapq
import hmac
import json
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import jwt
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat, load_pem_public_key

from mcp_tasks.runtime import contract

ALGORITHM: Final = "EdDSA"
"""The signature of a session offer (JWT `alg`)."""
LEEWAY_S: Final = 10.0
"""Clock skew tolerated between the executor and the worker, in seconds."""
MAC_CONTEXT: Final = b"mcp-tasks warm call v1\n"
"""What a call credential's MAC covers first (domain separation): then `<sessionId>.<payload>`."""
SESSION_KEY_CONTEXT: Final = b"mcp-tasks warm session v1"
"""The start of the HKDF `info` a session key is derived with (`session_key_info`)."""
MAX_SESSIONS: Final = 1024
"""Sessions a worker keeps at most; past this many the soonest to expire is forgotten, and any offer that
expires no later than it is refused from then on (its session cannot be opened again with a reset
counter)."""
_PEM_END: Final = "-----END PUBLIC KEY-----"
_OFFER_CLAIMS: Final = ["aud", "exp", "iat", "jti", "op", "workerKey", "executorKey"]
_WINDOW_MASK: Final = (1 << contract.CALL_REPLAY_WINDOW) - 1


@dataclass(frozen=True, slots=True)
class Grant:
    """What a verified credential allows: `operation` on call `execution_id`, for `caller` (opaque)."""

    caller: str
    execution_id: str
    operation: str
    session_id: str
    counter: int
    expires_at: float
    """Wall-clock seconds (`exp`)."""
    body_sha256: str | None


@dataclass(slots=True, eq=False)
class _Session:
    """One executor's session: its key, when it ends and which counters were taken.

    `taken` holds one bit per counter from `highest` down (bit 0 is `highest`), `CALL_REPLAY_WINDOW` bits.
    """

    key: bytes
    expires_at: float
    highest: int = 0
    taken: int = 1  # counter 0 is never valid

    def take(self, counter: int) -> bool:
        """Take `counter` unless it was taken or fell out of the window. O(1): a shift of a fixed-size int."""
        ahead = counter - self.highest
        if ahead > 0:
            self.taken = ((self.taken << ahead) | 1) & _WINDOW_MASK if ahead < contract.CALL_REPLAY_WINDOW else 1
            self.highest = counter
            return True
        if -ahead >= contract.CALL_REPLAY_WINDOW:
            return False
        bit = 1 << -ahead
        if self.taken & bit:
            return False
        self.taken |= bit
        return True


def b64url(data: bytes) -> str:
    """Base64url without padding (RFC 7515 §2)."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    """The bytes of unpadded base64url `text`.

    Raises:
        ValueError: not base64url.
    """
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:
        raise ValueError("not base64url") from exc


def session_key_info(audience: str, session_id: str, worker_key: str, executor_key: str) -> bytes:
    """The HKDF `info` of a session key: the context, the audience, the session id and both public keys."""
    return b"\n".join(
        (SESSION_KEY_CONTEXT, audience.encode(), session_id.encode(), worker_key.encode(), executor_key.encode())
    )


def derive_session_key(shared: bytes, info: bytes) -> bytes:
    """The 32-byte session key from an X25519 shared secret (HKDF-SHA256, no salt, RFC 5869)."""
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(shared)


def call_mac(key: bytes, session_id: str, payload: str) -> bytes:
    """The HMAC-SHA256 of a call credential: over `MAC_CONTEXT`, the session id, `.` and the payload."""
    return hmac.digest(key, MAC_CONTEXT + session_id.encode("ascii") + b"." + payload.encode("ascii"), "sha256")


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
    """Opens sessions and checks call credentials for one worker of tool `tool` (thread-safe).

    Args:
        public_keys: the executor's public key(s); an offer signed by any of them opens a session.
        tool: the tool this worker serves (an offer's audience must name it).
    """

    def __init__(self, public_keys: list[Ed25519PublicKey], tool: str) -> None:
        self._keys = public_keys
        self.audience = contract.CALL_AUDIENCE_PREFIX + tool
        self._private = X25519PrivateKey.generate()  # this worker's: never leaves the process
        self.worker_key = b64url(self._private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))
        """This worker's X25519 public key, base64url (`GET /v1/sessions`); not a secret."""
        self._sessions: dict[str, _Session] = {}
        self._expiry: list[tuple[float, str]] = []  # (expires_at, session id), a min-heap: forgetting never scans
        self._floor_s = 0.0  # offers expiring at or before this are refused (their session was forgotten early)
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

    @property
    def sessions(self) -> int:
        """How many sessions are open (expired ones included until they are forgotten)."""
        return len(self._sessions)

    # ---------------------------------------------------------------- sessions (rare)

    def open_session(self, authorization: list[str], now_s: float | None = None) -> bool:
        """Open the session the one `Authorization: Bearer <offer>` header given offers; whether it did.

        Refused: not exactly one Bearer header, a signature by no key of ours, another audience or worker
        key, a lifetime over `contract.SESSION_MAX_LIFETIME_S`, an expired offer, or one whose session is
        (or was) open already. Costs an Ed25519 verification and an X25519 exchange (about 0.2 ms).

        Args:
            authorization: every `Authorization` header of the request.
            now_s: wall-clock seconds (default: now).
        """
        token = _bearer(authorization)
        if token is None:
            return False
        claims = self._decode_offer(token)
        if claims is None:
            return False
        try:
            session_id = _text(claims["jti"])
            expires_at = float(claims["exp"])
            lifetime = expires_at - float(claims["iat"])
            executor_key = _text(claims["executorKey"])
            if (
                claims["op"] != contract.SESSION_OPERATION
                or not hmac.compare_digest(_text(claims["workerKey"]), self.worker_key)
                or not 0 < lifetime <= contract.SESSION_MAX_LIFETIME_S
                or not session_id.isascii()
                or "." in session_id
            ):
                return False
            shared = self._private.exchange(X25519PublicKey.from_public_bytes(b64url_decode(executor_key)))
        except (TypeError, ValueError):  # malformed claims, a key of the wrong size, a low-order point
            return False
        key = derive_session_key(shared, session_key_info(self.audience, session_id, self.worker_key, executor_key))
        now = time.time() if now_s is None else now_s
        with self._lock:
            if session_id in self._sessions or expires_at <= self._floor_s:
                return False  # a replayed offer: its session keeps its taken counters
            expiry = self._expiry
            while expiry and (expiry[0][0] + 2 * LEEWAY_S < now or len(expiry) >= MAX_SESSIONS):
                forgotten_at, forgotten = heapq.heappop(expiry)  # O(log n), each session once
                del self._sessions[forgotten]
                self._floor_s = max(self._floor_s, forgotten_at)
            heapq.heappush(expiry, (expires_at, session_id))
            self._sessions[session_id] = _Session(key, expires_at)
        return True

    def _decode_offer(self, token: str) -> dict[str, Any] | None:
        for key in self._keys:
            try:
                claims: dict[str, Any] = jwt.decode(
                    token,
                    key,
                    algorithms=[ALGORITHM],
                    audience=self.audience,
                    leeway=LEEWAY_S,
                    options={"require": _OFFER_CLAIMS},
                )
            except jwt.InvalidSignatureError:
                continue  # perhaps the other key of a rotation
            except jwt.InvalidTokenError:
                return None
            return claims
        return None

    # ---------------------------------------------------------------- calls (every request)

    def verify(
        self, authorization: list[str], operation: str, execution_id: str | None, now_s: float | None = None
    ) -> Grant | None:
        """The grant of the one `Authorization: Bearer` credential given, or `None` if it does not allow
        `operation` on `execution_id` (`None`: a call, whose id is in the body `bind` checks).

        A credential that verifies is taken: presented again, it is refused. O(1) whatever the number
        of calls taken or sessions open; a few microseconds (an HMAC, a small JSON object).

        Args:
            authorization: every `Authorization` header of the request (two or more never verify).
            operation: one of `contract.CALL_OPERATIONS`.
            execution_id: the call the request addresses (re-attach, cancel).
            now_s: wall-clock seconds (default: now).
        """
        token = _bearer(authorization)
        if token is None:
            return None
        parts = token.split(".")
        if len(parts) != 3:
            return None
        session_id, payload, mac = parts
        session = self._sessions.get(session_id)
        now = time.time() if now_s is None else now_s
        if session is None or session.expires_at + LEEWAY_S < now:
            return None
        try:
            if not hmac.compare_digest(call_mac(session.key, session_id, payload), b64url_decode(mac)):
                return None
            claims = json.loads(b64url_decode(payload))
            grant = Grant(
                caller=_text(claims["sub"]),
                execution_id=_text(claims["executionId"]),
                operation=_text(claims["op"]),
                session_id=session_id,
                counter=_counter(claims["n"]),
                expires_at=float(claims["exp"]),
                body_sha256=_text(claims["bodySha256"]) if "bodySha256" in claims else None,
            )
        except (TypeError, ValueError, KeyError, UnicodeEncodeError):
            return None
        if grant.operation != operation:
            return None
        if not now - LEEWAY_S <= grant.expires_at <= now + contract.CALL_MAX_LIFETIME_S + LEEWAY_S:
            return None
        if execution_id is not None and not hmac.compare_digest(grant.execution_id, execution_id):
            return None
        with self._lock:
            if not session.take(grant.counter):
                return None
        return grant

    def bind(self, grant: Grant, execution_id: str, body: bytes) -> bool:
        """Whether a call's `grant` was minted for this very body and call (`execution_id` is the body's)."""
        if grant.operation != "call" or grant.body_sha256 is None:
            return False
        if not hmac.compare_digest(grant.execution_id, execution_id):
            return False
        return hmac.compare_digest(grant.body_sha256, hashlib.sha256(body).hexdigest())


def _bearer(authorization: list[str]) -> str | None:
    if len(authorization) != 1:
        return None
    scheme, _, token = authorization[0].strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


def _text(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError("expected a non-empty string")
    return value


def _counter(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 2**63:
        raise ValueError("expected an integer from 1 to 2**63 - 1")
    return value
