"""Integrity-protected `requestState` for pre-creation MRTR rounds (SEP-2322 §requestState).

`requestState` is attacker-controlled, so ours is `base64url(payload).base64url(HMAC-SHA256(payload))`
where the payload binds the principal, the tool, a digest of the arguments and an expiry. A state
that fails any check is rejected with -32602.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time

from mcp_tasks.protocol.errors import InvalidParams, JsonObject
from mcp_tasks.tasks.ids import TaskId
from mcp_tasks.tasks.owner import Owner


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def arguments_digest(arguments: JsonObject) -> str:
    """SHA-256 of the canonical JSON of the arguments."""
    return hashlib.sha256(json.dumps(arguments, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def issue(secret: bytes, owner: Owner, tool: str, arguments: JsonObject, ttl_s: int) -> str:
    """Mint a `requestState` bound to this principal, tool and arguments, valid for `ttl_s` seconds."""
    payload = json.dumps(
        {
            "t": owner.tenant,
            "s": owner.subject,
            "tool": tool,
            "args": arguments_digest(arguments),
            "exp": int(time.time()) + ttl_s,
        },
        separators=(",", ":"),
    ).encode()
    return f"{_b64(payload)}.{_b64(hmac.new(secret, payload, hashlib.sha256).digest())}"


def verify(secret: bytes, state: str, owner: Owner, tool: str, arguments: JsonObject) -> None:
    """Check a returned `requestState`.

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
        or claims.get("tool") != tool
        or claims.get("args") != arguments_digest(arguments)
        or not isinstance(claims.get("exp"), int)
        or claims["exp"] < time.time()
    ):
        raise invalid


def task_id_for(secret: bytes, state: str) -> TaskId:
    """The task id a verified `requestState` creates: the same state always names the same task (128 bits)."""
    return TaskId(hmac.new(secret, b"task-id:" + state.encode(), hashlib.sha256).hexdigest()[:32])
