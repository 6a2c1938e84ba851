"""Warm-call sessions and credentials, both sides in process: `WarmCallSigner` offers and mints, `CallVerifier`
opens and checks (the HTTP around them: tests/e2e/test_warm_auth.py).

Our choice (issue 31 item 1; `contract.PATH_SESSIONS`, `contract.PATH_CALLS`, docs/security.md): a session is
opened only by the holder of the executor's Ed25519 key and only on the worker whose key its offer names;
each request's HMAC binds it to that session, the operation, the call, the caller, the body and a short
expiry, and is taken once.
"""

from __future__ import annotations

import hashlib
import secrets
import time

from mcp_tasks.runtime import call_auth, contract
from mcp_tasks.runtime.call_auth import CallVerifier
from mcp_tasks.tasks.owner import Owner
from mcp_tasks.worker import warm_auth
from mcp_tasks.worker.warm_auth import WarmCallSigner, WarmSession, new_private_pem

TOOL = "echo"
URL = "http://127.0.0.1:1"
BODY = b'{"executionId": "e1", "arguments": {}}'
CALLER = "c" * 32


def signer_and_worker() -> tuple[WarmCallSigner, CallVerifier]:
    signer = WarmCallSigner.from_pem(new_private_pem())
    return signer, CallVerifier(call_auth.load_public_keys(signer.public_pem), TOOL)


def opened(signer: WarmCallSigner, worker: CallVerifier, **kwargs: float) -> WarmSession:
    session, offer = signer.offer(TOOL, URL, worker.worker_key, **kwargs)
    assert worker.open_session([f"Bearer {offer}"])
    return session


def call(worker: CallVerifier, token: str, execution_id: str = "e1", body: bytes = BODY) -> bool:
    """Whether `worker` takes `token` for a call of `execution_id` with `body` (as `runtime.serve` asks)."""
    grant = worker.verify([f"Bearer {token}"], "call", None)
    return grant is not None and worker.bind(grant, execution_id, body)


def test_a_credential_of_an_open_session_runs_its_call_once() -> None:
    signer, worker = signer_and_worker()
    session = opened(signer, worker)
    token = session.credential("call", "e1", CALLER, BODY)
    grant = worker.verify([f"Bearer {token}"], "call", None)
    assert grant is not None and (grant.caller, grant.execution_id) == (CALLER, "e1")
    assert worker.bind(grant, "e1", BODY)
    assert not call(worker, token), "a replayed credential was taken again"


def test_a_forged_credential_is_refused() -> None:
    """A guessed key with a real session id, an unknown session id, a flipped MAC, a changed payload."""
    signer, worker = signer_and_worker()
    session = opened(signer, worker)
    guessed = WarmSession(TOOL, URL, session.session_id, secrets.token_bytes(32), session.expires_at)
    unknown = WarmSession(TOOL, URL, "unknown", session.key, session.expires_at)
    assert not call(worker, guessed.credential("call", "e1", CALLER, BODY))
    assert not call(worker, unknown.credential("call", "e1", CALLER, BODY))
    sid, payload, mac = session.credential("call", "e1", CALLER, BODY).split(".")
    flipped = call_auth.b64url(bytes([call_auth.b64url_decode(mac)[0] ^ 1]) + call_auth.b64url_decode(mac)[1:])
    assert not call(worker, f"{sid}.{payload}.{flipped}")
    other = session.credential("call", "e2", CALLER, BODY).split(".")[1]
    assert not call(worker, f"{sid}.{other}.{mac}", "e2")
    assert call(worker, session.credential("call", "e1", CALLER, BODY)), "the session still works"


def test_a_session_is_opened_only_by_an_offer_signed_with_the_executors_key_for_this_worker_and_tool() -> None:
    signer, worker = signer_and_worker()
    forger = WarmCallSigner.from_pem(new_private_pem())
    _, other_worker = signer_and_worker()
    past = time.time() - 2 * contract.SESSION_MAX_LIFETIME_S
    refused = {
        "forged": forger.offer(TOOL, URL, worker.worker_key)[1],
        "other worker": signer.offer(TOOL, URL, other_worker.worker_key)[1],
        "other tool": signer.offer("other", URL, worker.worker_key)[1],
        "expired": signer.offer(TOOL, URL, worker.worker_key, now_s=past)[1],
        "too long": signer.offer(TOOL, URL, worker.worker_key, lifetime_s=contract.SESSION_MAX_LIFETIME_S + 60)[1],
    }
    assert {name: worker.open_session([f"Bearer {offer}"]) for name, offer in refused.items()} == dict.fromkeys(
        refused, False
    )
    assert not worker.open_session([]) and not worker.open_session(["Bearer a.b.c"])
    assert worker.sessions == 0


def test_a_session_of_one_worker_authorizes_nothing_on_another() -> None:
    signer, first = signer_and_worker()
    second = CallVerifier(call_auth.load_public_keys(signer.public_pem), TOOL)
    session, offer = signer.offer(TOOL, URL, first.worker_key)
    assert first.open_session([f"Bearer {offer}"])
    assert not second.open_session([f"Bearer {offer}"]), "the offer names the first worker's key"
    assert not call(second, session.credential("call", "e1", CALLER, BODY))
    assert call(first, session.credential("call", "e1", CALLER, BODY))


def test_a_credential_is_bound_to_its_operation_call_body_and_expiry() -> None:
    signer, worker = signer_and_worker()
    session = opened(signer, worker)
    assert not call(worker, session.credential("call", "e1", CALLER, BODY), body=BODY + b" ")
    assert not call(worker, session.credential("call", "e1", CALLER, BODY), execution_id="e2")
    assert not call(worker, session.credential("cancel", "e1", CALLER))
    assert not call(worker, session.credential("call", "e1", CALLER, BODY, now_s=time.time() - 600))
    assert not call(worker, session.credential("call", "e1", CALLER, BODY, lifetime_s=3600)), "too long-lived"
    cancel = session.credential("cancel", "e1", CALLER)
    assert worker.verify([f"Bearer {cancel}"], "cancel", "e2") is None
    assert worker.verify([f"Bearer {cancel}"], "reattach", "e1") is None
    grant = worker.verify([f"Bearer {cancel}"], "cancel", "e1")
    assert grant is not None and grant.caller == CALLER
    assert worker.verify([f"Bearer {cancel}"], "cancel", "e1") is None, "a cancel's credential is taken once too"
    assert worker.verify([f"Bearer {cancel}", f"Bearer {cancel}"], "cancel", "e1") is None


def test_counters_may_arrive_out_of_order_within_the_window_and_no_further_behind() -> None:
    signer, worker = signer_and_worker()
    session = opened(signer, worker)
    tokens = [session.credential("call", "e1", CALLER, BODY) for _ in range(contract.CALL_REPLAY_WINDOW + 2)]
    assert call(worker, tokens[2]) and call(worker, tokens[1]) and call(worker, tokens[3])
    assert not call(worker, tokens[1]) and not call(worker, tokens[2])
    assert call(worker, tokens[-1])  # counter WINDOW + 2: counter 1 (tokens[0]) is now out of the window
    assert not call(worker, tokens[0])
    assert call(worker, tokens[4])
    assert not call(worker, tokens[-1])


def test_an_expired_session_takes_no_credential() -> None:
    signer, worker = signer_and_worker()
    session = opened(signer, worker, lifetime_s=60)
    token = session.credential("call", "e1", CALLER, BODY)
    later = time.time() + 60 + call_auth.LEEWAY_S + 1
    assert worker.verify([f"Bearer {token}"], "call", None, now_s=later) is None


def test_a_replayed_offer_opens_nothing_even_after_its_session_was_forgotten_early() -> None:
    """An offer replayed while its session is open, and one whose session was dropped to make room
    (`MAX_SESSIONS`): neither reopens it with its counters reset."""
    signer, worker = signer_and_worker()
    first, first_offer = signer.offer(TOOL, URL, worker.worker_key, lifetime_s=600)
    assert worker.open_session([f"Bearer {first_offer}"])
    token = first.credential("call", "e1", CALLER, BODY)
    assert call(worker, token)
    assert not worker.open_session([f"Bearer {first_offer}"])
    for _ in range(call_auth.MAX_SESSIONS):
        opened(signer, worker)
    assert worker.sessions == call_auth.MAX_SESSIONS
    assert not call(worker, first.credential("call", "e1", CALLER, BODY)), "the first session was dropped"
    assert not worker.open_session([f"Bearer {first_offer}"])
    assert not call(worker, token)


def test_principals_whose_fields_hold_a_nul_get_different_caller_digests() -> None:
    """Our choice (a breaker's finding): `acme`/`alice\\0x` and `acme\\0alice`/`x` joined with NULs gave one
    digest; a field with a NUL is digested as JSON, any other principal keeps the digest it always had."""
    one = Owner(tenant="acme", subject="alice\x00x", issuer="static")
    other = Owner(tenant="acme\x00alice", subject="x", issuer="static")
    assert warm_auth.caller_of(one) != warm_auth.caller_of(other)
    plain = Owner(tenant="acme", subject="alice", issuer="static")
    assert warm_auth.caller_of(plain) == hashlib.sha256(b"acme\x00alice\x00static").hexdigest()[:32]
