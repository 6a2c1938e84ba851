"""Scopes for the JSON-RPC ids of legacy-era (2025-11-25) calls: a signed `Mcp-Session-Id`, no session state.

A legacy client's JSON-RPC ids are unique only within its session (2025-11-25 `basic/index.mdx`: an id
"MUST NOT have been previously used by the requestor within the same session"); real clients start
every connection at the same ids (the Inspector CLI and langchain-mcp-adapters call with id 1 each
time). So a call's id names the call only together with its session, and a stateless server needs a
session it does not store:

- `initialize` is answered with `Mcp-Session-Id: <nonce>.<HMAC>`: 128 random bits, signed with the
  gateway's `request_state_secret` and bound to the principal (`mint_session_id`). Any replica verifies
  it (`session_nonce`); nothing is kept, so nothing routes or expires. The official Python SDK and the
  TypeScript SDK (1.x and 2.x, hence the Inspector and mcp-remote) echo it on every later POST.
- A legacy request carrying one that does not verify (forged, another principal's, or signed with a
  key the gateway no longer has) is answered 404, as 2025-11-25 `transports.mdx` §Session Management
  asks for a session the server does not know: the client then initializes again. `initialize` itself
  ignores any header it carries (a client starting over).
- A client that does not echo the header is served too (the header is optional, as the spec lets a
  server issue none): its calls' hidden tasks get random ids, and `LiveCalls` lets a
  `notifications/cancelled` reach a call that the replica receiving it follows.

`LiveCalls` is the replica's list of the legacy calls whose streams it has open; an entry lives
exactly as long as its stream and is never a routing key or a record of the session. Called by
`legacy` (header checks) and `legacy_calls` (task ids, cancellation); imports nothing of the gateway.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

from mcp_tasks.protocol.jsonrpc import RequestId
from mcp_tasks.tasks.owner import Owner

_TOKEN: Final = re.compile(r"^([0-9a-f]{32})\.([0-9a-f]{32})$")


def mac(secret: bytes, *parts: str) -> str:
    """128 bits of HMAC-SHA256 over `parts` (NUL-separated) under `secret`, as 32 lowercase hex digits."""
    return hmac.new(secret, "\x00".join(parts).encode(), hashlib.sha256).hexdigest()[:32]


def mint_session_id(secret: bytes, owner: Owner) -> str:
    """A new `Mcp-Session-Id` for `owner`: `<nonce>.<HMAC>`, 65 visible ASCII characters.

    The nonce is 128 bits from the CSPRNG (2025-11-25 `transports.mdx`: globally unique and
    cryptographically secure); the HMAC binds it to `owner` under `secret`.
    """
    nonce = secrets.token_hex(16)
    return f"{nonce}.{mac(secret, 'legacy-session', owner.tenant, owner.subject, owner.issuer, nonce)}"


def session_nonce(secret: bytes, owner: Owner, session_id: str) -> str | None:
    """The nonce of a genuine `Mcp-Session-Id` issued to `owner`, else `None` (forged, foreign, malformed)."""
    parts = _TOKEN.match(session_id.strip())
    if parts is None:
        return None
    nonce, signature = parts.groups()
    expected = mac(secret, "legacy-session", owner.tenant, owner.subject, owner.issuer, nonce)
    return nonce if hmac.compare_digest(signature, expected) else None


@dataclass(frozen=True, slots=True)
class CallKey:
    """Who sent a legacy call: its principal, its session nonce (`None`: no session) and its JSON-RPC id."""

    owner: Owner
    session: str | None
    request_id: str

    @classmethod
    def of(cls, owner: Owner, session: str | None, request_id: RequestId) -> CallKey:
        """The key of a call; `1` and `"1"` are different JSON-RPC ids, so the id is kept as JSON."""
        return cls(owner, session, json.dumps(request_id))


@dataclass(slots=True)
class LiveCalls:
    """The legacy calls whose SSE streams this replica has open: `CallKey` → their hidden tasks' ids.

    Bounded by the open streams (each entry is removed when its stream ends). Lets a
    `notifications/cancelled` find a call whose task id cannot be derived (a client without a session).
    """

    _calls: dict[CallKey, list[str]] = field(default_factory=dict)

    @contextlib.contextmanager
    def following(self, key: CallKey, task_id: str) -> Iterator[None]:
        """Register `task_id` under `key` while the `with` block runs (the call's stream is open)."""
        self._calls.setdefault(key, []).append(task_id)
        try:
            yield
        finally:
            held = self._calls.get(key, [])
            if task_id in held:
                held.remove(task_id)
            if not held:
                self._calls.pop(key, None)

    def find(self, key: CallKey) -> tuple[str, ...]:
        """The hidden task ids of the open calls under `key`, oldest first (usually none or one)."""
        return tuple(self._calls.get(key, ()))
