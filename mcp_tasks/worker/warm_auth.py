"""Warm-call credentials, the executor's side: open a session with each warm worker, then MAC each request.

A warm worker (`runtime.serve`) takes a request only with a credential keyed with a session an executor
holding the warm-call key opened on that very worker (`runtime.call_auth`; format in `contract.PATH_SESSIONS`
and `contract.PATH_CALLS`). `WarmCallSigner` holds the Ed25519 private key: it signs a session offer once
per worker (and again before the session's hour ends, or when the worker no longer knows it), and keeps
the session key; `WarmSession.credential` then binds each request, for a few microseconds, to the call
(execution id), the operation, the caller (a digest of the principal), a short expiry, the session's
counter and, for a call, the exact body. Held by whoever sends warm calls: the embedded runner; on
Kubernetes the operator (tasks) and the gateways (synchronous calls). The key is never the gateways'
request-state key. Nothing here logs a credential or key.

A worker whose runtime predates sessions (a tool image built before them: it answers 404 to
`GET /v1/sessions`) is sent the previous scheme's credential instead, one signed JWT per request
(`LegacyWorker`, `WarmCallSigner.legacy_credential`), so an upgrade of mcp-tasks does not stop warm
tools whose images were not rebuilt.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import logging
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import aiohttp
import jwt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
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
"""Lifetime of one call credential, in seconds: enough for the request to reach the worker, which checks it
before it starts the call (a long call's later re-attach or cancel gets a fresh one)."""
SESSION_LIFETIME_S: Final = 3600
"""Lifetime of a session, in seconds (at most `contract.SESSION_MAX_LIFETIME_S`)."""
SESSION_RENEW_S: Final = 600
"""A session with less than this left, in seconds, is replaced by a new one before the next request."""
SESSION_OPEN_TIMEOUT_S: Final = 10.0
"""Longest the two requests that open a session may take together, in seconds."""
MAX_SESSIONS: Final = 4096
"""Sessions one executor process keeps at most (one per warm worker it calls); past this many the oldest
is dropped (a later request to that worker opens a new one)."""
LEGACY_RECHECK_S: Final = 3600
"""How long a worker found to predate sessions is taken as such, in seconds; then the next request asks it
again (as does a 401 from it: its address may now serve a rebuilt image)."""
_NO_PRINCIPAL: Final = "executor"

logger = logging.getLogger("mcp_tasks.worker")

Options = Mapping[str, Any]
"""Extra aiohttp request arguments for a worker (`WarmTarget.request_options`: its TLS verification)."""


class SessionUnavailable(Exception):
    """No session could be opened with a warm worker: nothing was sent to it that could run.

    `refused` is True when the worker answered and refused the offer (401: it checks another key, or
    serves another tool; or it is no warm worker): a configuration error rather than a passing one.
    """

    def __init__(self, message: str, refused: bool) -> None:
        super().__init__(message)
        self.refused = refused


class OlderRuntime(SessionUnavailable):
    """The worker answered 404 to `GET /v1/sessions`: its runtime predates sessions (`LegacyWorker`)."""


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
    fields = (owner.tenant, owner.subject, owner.issuer)
    # NUL-joined, as always (calls in flight over an upgrade keep their digest), unless a field holds a NUL:
    # then that form is ambiguous, and JSON says where each field ends
    ambiguous = any("\x00" in value for value in fields)
    preimage = "json:" + json.dumps(fields) if ambiguous else "\x00".join(fields)
    return hashlib.sha256(preimage.encode()).hexdigest()[:32]


@dataclass(slots=True, eq=False)
class WarmSession:
    """A session this executor opened on one warm worker: what keys its requests' credentials.

    Fields:
        tool: the tool the worker serves (the offer's audience).
        base_url: the worker's `http(s)://host:port`.
        session_id: the offer's `jti`.
        key: the 32-byte session key (HKDF of the X25519 exchange; never sent).
        expires_at: wall-clock seconds when the worker stops taking its credentials.
    """

    tool: str
    base_url: str
    session_id: str
    key: bytes = field(repr=False)
    expires_at: float
    _counter: itertools.count[int] = field(default_factory=lambda: itertools.count(1), repr=False)

    @property
    def renew_at(self) -> float:
        """Wall-clock seconds from which the next request opens a new session first (`SESSION_RENEW_S`)."""
        return self.expires_at - SESSION_RENEW_S

    def credential(
        self,
        operation: str,
        execution_id: str,
        caller: str,
        body: bytes | None = None,
        now_s: float | None = None,
        lifetime_s: float = LIFETIME_S,
    ) -> str:
        """One request's credential (`contract.PATH_CALLS`), with the session's next counter.

        Args:
            operation: `call`, `reattach` or `cancel` (`contract.CALL_OPERATIONS`).
            execution_id: the call it addresses.
            caller: the principal's digest (`caller_of`).
            body: the exact request body of a `call` (its SHA-256 is bound into the credential).
            now_s: issue time, wall-clock seconds (default: now; a test mints expired ones).
            lifetime_s: seconds from `now_s` until it expires.
        """
        issued = time.time() if now_s is None else now_s
        claims: dict[str, object] = {
            "n": next(self._counter),
            "exp": int(issued + lifetime_s),
            "op": operation,
            "sub": caller,
            "executionId": execution_id,
        }
        if body is not None:
            claims["bodySha256"] = hashlib.sha256(body).hexdigest()
        payload = call_auth.b64url(json.dumps(claims, separators=(",", ":")).encode())
        mac = call_auth.call_mac(self.key, self.session_id, payload)
        return f"{self.session_id}.{payload}.{call_auth.b64url(mac)}"


@dataclass(slots=True, eq=False)
class LegacyWorker:
    """A warm worker whose runtime predates sessions: each request to it carries a JWT of its own
    (`WarmCallSigner.legacy_credential`), what that runtime checks.

    Fields:
        signer: the signer that mints them.
        tool: the tool the worker serves.
        base_url: the worker's `http(s)://host:port`.
        renew_at: wall-clock seconds from which the next request asks the worker again whether it opens
            sessions (`LEGACY_RECHECK_S`).
    """

    signer: WarmCallSigner = field(repr=False)
    tool: str
    base_url: str
    renew_at: float

    def credential(self, operation: str, execution_id: str, caller: str, body: bytes | None = None) -> str:
        """One request's credential, as `WarmSession.credential`'s but in the previous scheme."""
        return self.signer.legacy_credential(self.tool, execution_id, operation, caller, body)


Keying = WarmSession | LegacyWorker
"""What keys the credentials of the requests to one warm worker: a session, or, for an older runtime, none."""


class WarmCallSigner:
    """Opens sessions with warm workers with one Ed25519 private key, and keeps them (one per worker).

    Args:
        private_key: the executor's key.
    """

    def __init__(self, private_key: Ed25519PrivateKey) -> None:
        self._key = private_key
        self.public_pem = (
            private_key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo).decode("ascii")
        )
        """The public key warm workers check offers with (`contract.ENV_SERVE_CALL_KEY`); not a secret."""
        self._sessions: dict[tuple[str, str], Keying] = {}  # (tool, base URL) → the session, oldest first
        self._opening: dict[tuple[str, str], asyncio.Future[Keying]] = {}
        self._told_older: dict[tuple[str, str], None] = {}  # workers logged as older runtimes, oldest first

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

    def offer(
        self,
        tool: str,
        base_url: str,
        worker_key: str,
        now_s: float | None = None,
        lifetime_s: float = SESSION_LIFETIME_S,
    ) -> tuple[WarmSession, str]:
        """A new session with the worker whose X25519 public key is `worker_key`, and the signed offer that
        opens it there (a JWT, EdDSA; claims in `contract.PATH_SESSIONS`). Nothing is sent.

        Args:
            tool: the tool the worker serves (the audience).
            base_url: where the worker is (kept with the session).
            worker_key: base64url of the worker's key (its `GET /v1/sessions`).
            now_s: issue time, wall-clock seconds (default: now; a test makes expired ones).
            lifetime_s: seconds from `now_s` until the session ends.

        Raises:
            ValueError: `worker_key` is not a base64url X25519 public key (32 bytes).
        """
        audience = contract.CALL_AUDIENCE_PREFIX + tool
        ephemeral = X25519PrivateKey.generate()  # one per session: its key is known to no other session
        executor_key = call_auth.b64url(ephemeral.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))
        session_id = secrets.token_urlsafe(16)
        shared = ephemeral.exchange(X25519PublicKey.from_public_bytes(call_auth.b64url_decode(worker_key)))
        info = call_auth.session_key_info(audience, session_id, worker_key, executor_key)
        issued = time.time() if now_s is None else now_s
        expires_at = int(issued + lifetime_s)
        claims = {
            "aud": audience,
            "iat": int(issued),
            "exp": expires_at,
            "jti": session_id,
            "op": contract.SESSION_OPERATION,
            "workerKey": worker_key,
            "executorKey": executor_key,
        }
        session = WarmSession(tool, base_url, session_id, call_auth.derive_session_key(shared, info), expires_at)
        return session, jwt.encode(claims, self._key, algorithm=call_auth.ALGORITHM)

    async def open_session(
        self, http: aiohttp.ClientSession, base_url: str, tool: str, options: Options | None = None
    ) -> WarmSession:
        """Open a new session on the worker at `base_url` (`GET` then `POST /v1/sessions`); not kept.

        Raises:
            OlderRuntime: the worker answered 404 to the `GET`: it takes `legacy_credential`s instead.
            SessionUnavailable: the worker is unreachable, does not answer in `SESSION_OPEN_TIMEOUT_S`, or
                refuses the offer.
        """
        url = base_url + contract.PATH_SESSIONS
        extra = dict(options or {})
        try:
            async with asyncio.timeout(SESSION_OPEN_TIMEOUT_S):
                async with http.get(url, **extra) as response:
                    answer = await response.json(content_type=None) if response.status == 200 else None
                if response.status == 404:
                    raise OlderRuntime(f"{url} answered 404: a runtime from before sessions", refused=True)
                worker_key = answer.get("workerKey") if isinstance(answer, dict) else None
                if not isinstance(worker_key, str):
                    raise SessionUnavailable(
                        f"{url} answered {response.status} without a workerKey: not a warm worker of this version",
                        refused=True,
                    )
                try:
                    session, offer = self.offer(tool, base_url, worker_key)
                except ValueError:
                    raise SessionUnavailable(f"{url}: its workerKey is not an X25519 key", refused=True) from None
                async with http.post(url, headers={"Authorization": f"Bearer {offer}"}, **extra) as response:
                    await response.read()
                    if response.status != 204:
                        raise SessionUnavailable(
                            f"the warm worker {base_url} refused the session ({response.status}): it checks "
                            "another warm-call key (MCPTASKS_WARM_CALL_KEY_FILE) or serves another tool",
                            refused=True,
                        )
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
            raise SessionUnavailable(f"no session with the warm worker {base_url}: {exc!r}", refused=False) from exc
        return session

    async def session(
        self, http: aiohttp.ClientSession, base_url: str, tool: str, options: Options | None = None
    ) -> Keying:
        """The session with the worker at `base_url`: the one kept, or a new one when it has less than
        `SESSION_RENEW_S` left or there is none (concurrent requests share one opening). A worker that
        answers 404 (`OlderRuntime`) is kept as a `LegacyWorker` for `LEGACY_RECHECK_S`, and logged once.

        Raises:
            SessionUnavailable: as `open_session` (never `OlderRuntime`).
        """
        key = (tool, base_url)
        kept = self._sessions.get(key)
        if kept is not None and time.time() < kept.renew_at:
            return kept
        opening = self._opening.get(key)
        if opening is None:
            opening = asyncio.get_running_loop().create_task(
                self._open_and_keep(key, http, options), name=f"warm-session-{tool}"
            )
            self._opening[key] = opening
            opening.add_done_callback(lambda done: self._opened(key, done))
        return await asyncio.shield(opening)  # one caller's cancel does not cancel the others' opening

    async def _open_and_keep(
        self, key: tuple[str, str], http: aiohttp.ClientSession, options: Options | None
    ) -> Keying:
        tool, base_url = key
        session: Keying
        try:
            session = await self.open_session(http, base_url, tool, options)
        except OlderRuntime:
            session = LegacyWorker(self, tool, base_url, time.time() + LEGACY_RECHECK_S)
            self._tell_older(key)
        self._sessions.pop(key, None)  # re-inserted last: the dict stays in opening order
        self._sessions[key] = session
        while len(self._sessions) > MAX_SESSIONS:
            del self._sessions[next(iter(self._sessions))]  # the oldest: O(1), never a scan
        return session

    def _tell_older(self, key: tuple[str, str]) -> None:
        """Log, once per worker, that it runs an older runtime and what that costs."""
        if key in self._told_older:
            return
        self._told_older[key] = None
        while len(self._told_older) > MAX_SESSIONS:
            del self._told_older[next(iter(self._told_older))]
        tool, base_url = key
        logger.warning(
            "warm worker %s of tool %s runs a tool runtime from before warm-call sessions (404 on %s): its calls "
            "are signed one by one as that runtime expects, about 0.2 ms more CPU per call; rebuild the tool's "
            "image with this version of mcp-tasks to drop the cost",
            base_url,
            tool,
            contract.PATH_SESSIONS,
            extra={"tool": tool},
        )

    def _opened(self, key: tuple[str, str], done: asyncio.Future[Keying]) -> None:
        if self._opening.get(key) is done:
            del self._opening[key]
        if not done.cancelled():
            done.exception()  # retrieved: every waiter got it already

    def forget(self, session: Keying) -> None:
        """Drop `session` (its worker refused a credential of it: it restarted, or forgot it, or its address
        now serves another runtime); the next request to that worker opens a new one. A newer session kept
        for the worker stays.
        """
        key = (session.tool, session.base_url)
        if self._sessions.get(key) is session:
            del self._sessions[key]

    def legacy_credential(
        self,
        tool: str,
        execution_id: str,
        operation: str,
        caller: str,
        body: bytes | None = None,
        now_s: float | None = None,
        lifetime_s: float = LIFETIME_S,
    ) -> str:
        """One request's credential in the scheme before sessions: a JWT signed with EdDSA (Ed25519), with
        claims `aud` (`contract.CALL_AUDIENCE_PREFIX` + `tool`), `iat`, `exp`, `jti` (unique: the worker takes
        a call's once), `sub` (`caller`), `op` (`operation`), `executionId` and, for a call, `bodySha256`
        (hex SHA-256 of the exact body). About 55 µs here and 180 µs in the worker per request, against
        9 and 13 µs with a session (docs/performance.md).

        Only for warm workers whose runtime predates sessions (`LegacyWorker`): tool images built with
        mcp-tasks before commit 7e24b09 (0.1.0 as of then). It can go, with `LegacyWorker` and `OlderRuntime`,
        once no supported upgrade starts from such a runtime: the release after the first one that ships
        sessions, whose notes say warm tool images must be rebuilt.

        Args:
            tool: the tool whose workers may take it (the audience).
            execution_id: the call it addresses.
            operation: `call`, `reattach` or `cancel` (`contract.CALL_OPERATIONS`).
            caller: the principal's digest (`caller_of`).
            body: the exact request body of a `call`.
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

    async def request(
        self,
        http: aiohttp.ClientSession,
        method: str,
        base_url: str,
        path: str,
        operation: str,
        body: bytes | None = None,
        options: Options | None = None,
    ) -> aiohttp.ClientResponse:
        """Send one request to the worker at `base_url` with a credential minted now; the response (the
        caller reads and releases it, e.g. `async with`).

        A 401 (the worker restarted with a new session key, or forgot the session, or its address now serves
        another runtime) is sent once more on a new session (or as `LegacyWorker`, asked again): a worker
        answers 401 before it reads the body or touches a call, so nothing ran.

        Raises:
            SessionUnavailable: no session could be opened (nothing was sent that could run).
            aiohttp.ClientError, OSError: the request failed.
        """
        headers = {"Content-Type": "application/json"} if body is not None else {}
        extra = dict(options or {})
        for last in (False, True):
            session = await self.signer.session(http, base_url, self.tool, options)
            token = session.credential(operation, self.execution_id, self.caller, body)
            headers["Authorization"] = f"Bearer {token}"
            response = await http.request(method, base_url + path, data=body, headers=headers, **extra)
            if response.status != 401 or last:
                return response
            response.release()
            self.signer.forget(session)
        raise AssertionError("unreachable")
