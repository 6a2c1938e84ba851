"""Integrity-protected `requestState` for multi-round-trip requests (SEP-2322 §requestState).

`requestState` is attacker-controlled, so ours is `base64url(payload).base64url(HMAC-SHA256(payload))`
where the payload binds the principal, the tool, a digest of the arguments and an expiry, and, for a
round of a run already under way, the hidden task that holds the run (`run`) and the input keys that
round asked (so every round's state differs). A state that fails any check is rejected with -32602.
The expiry is read on the injected wall clock (the gateway's `Services.clock`), so tests drive it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Sequence
from dataclasses import dataclass

from mcp_tasks.protocol.errors import InvalidParams, JsonObject
from mcp_tasks.tasks.ids import TaskId
from mcp_tasks.tasks.interfaces import Clock, utc_now
from mcp_tasks.tasks.owner import Owner


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def arguments_digest(arguments: JsonObject) -> str:
    """SHA-256 of the canonical JSON of the arguments."""
    return hashlib.sha256(json.dumps(arguments, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class StateClaims:
    """What a verified `requestState` says: `run` is the hidden task holding a run under way (`None` for a
    pre-creation round), `keys` the input keys its round asked.
    """

    run: str | None = None
    keys: tuple[str, ...] = ()


def issue(
    secret: bytes,
    owner: Owner,
    tool: str,
    arguments: JsonObject,
    ttl_s: int,
    run: str | None = None,
    keys: Sequence[str] = (),
    clock: Clock = utc_now,
) -> str:
    """Mint a `requestState` bound to this principal, tool and arguments, valid for `ttl_s` seconds from `clock()`.

    `run` and `keys` bind it to the hidden task of a run under way and the keys its round asks.
    """
    claims: dict[str, object] = {
        "t": owner.tenant,
        "s": owner.subject,
        "i": owner.issuer,
        "tool": tool,
        "args": arguments_digest(arguments),
        "exp": int(clock().timestamp()) + ttl_s,
    }
    if run is not None:
        claims["run"] = run
        claims["keys"] = sorted(keys)
    payload = json.dumps(claims, separators=(",", ":")).encode()
    return f"{_b64(payload)}.{_b64(hmac.new(secret, payload, hashlib.sha256).digest())}"


def verify(
    secret: bytes, state: str, owner: Owner, tool: str, arguments: JsonObject, clock: Clock = utc_now
) -> StateClaims:
    """Check a returned `requestState` and return what it binds (expired when `clock()` is past its expiry).

    Raises:
        InvalidParams: tampered, expired, or issued for another principal, tool or arguments (-32602).
    """
    invalid = InvalidParams("Invalid params: requestState is invalid or expired; call the tool again without it")
    try:
        encoded_payload, encoded_mac = state.split(".", 1)
        payload = _unb64(encoded_payload)
        mac = _unb64(encoded_mac)
    except ValueError as exc:
        raise invalid from exc
    if not hmac.compare_digest(mac, hmac.new(secret, payload, hashlib.sha256).digest()):
        raise invalid
    try:
        claims = json.loads(payload)
    except ValueError as exc:
        raise invalid from exc
    if (
        claims.get("t") != owner.tenant
        or claims.get("s") != owner.subject
        or claims.get("i") != owner.issuer
        or claims.get("tool") != tool
        or claims.get("args") != arguments_digest(arguments)
        or not isinstance(claims.get("exp"), int)
        or claims["exp"] < clock().timestamp()
    ):
        raise invalid
    run = claims.get("run")
    return StateClaims(run=run if isinstance(run, str) else None, keys=tuple(claims.get("keys") or ()))


def task_id_for(secret: bytes, state: str) -> TaskId:
    """The task id a verified `requestState` creates: the same state always names the same task (128 bits)."""
    return TaskId(hmac.new(secret, b"task-id:" + state.encode(), hashlib.sha256).hexdigest()[:32])
