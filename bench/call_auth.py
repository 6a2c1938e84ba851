"""CPU per warm call of its credential, each side, and whether it stays flat as calls are remembered.

    python -m bench.call_auth [--n 20000] [--remembered 0,10000,100000]

Calls the real functions, one call after another on one thread, and prints CPU microseconds per call
(`process_time`, best of `--rounds`): the executor's `WarmSession.credential` (the HMAC it sends with every
call) and the worker's `CallVerifier.verify` and `bind` (what `runtime.serve` runs in the request's thread
before a call starts). With `--remembered N` the worker has already taken N calls on the measured session
(and holds N / 1,000 other sessions): the per-call cost must be the same at any N (issue 31 item 1: at
most 0.05 ms per side, flat from 0 to 100,000). Also prints the rare step, opening a session (the
executor's signed offer and the worker's check of it), once per executor and worker and hour.
"""

from __future__ import annotations

import argparse
import time

from mcp_tasks.runtime.call_auth import CallVerifier, load_public_keys
from mcp_tasks.worker.warm_auth import WarmCallSigner, WarmSession, new_private_pem

TOOL = "bench"
URL = "http://127.0.0.1:1"
BODY = b'{"executionId": "e", "tool": "bench", "arguments": {"text": "r1"}, "taskId": null, "attempt": 1}'
CALLER = "c" * 32
TARGET_US = 50.0


def _open(signer: WarmCallSigner, verifier: CallVerifier) -> WarmSession:
    session, offer = signer.offer(TOOL, URL, verifier.worker_key)
    if not verifier.open_session([f"Bearer {offer}"]):
        raise RuntimeError("the worker refused the session")
    return session


def _take(verifier: CallVerifier, token: str, execution_id: str) -> None:
    grant = verifier.verify([f"Bearer {token}"], "call", None)
    if grant is None or not verifier.bind(grant, execution_id, BODY):
        raise RuntimeError("the worker refused a call")


def measure(n: int, remembered: int, rounds: int) -> dict[str, float]:
    """CPU µs per call of `credential`, `verify` and `bind` (best round) with `remembered` calls taken."""
    signer = WarmCallSigner.from_pem(new_private_pem())
    verifier = CallVerifier(load_public_keys(signer.public_pem), TOOL)
    for _ in range(remembered // 1000):
        _open(signer, verifier)
    session = _open(signer, verifier)
    for index in range(remembered):
        _take(verifier, session.credential("call", f"w{index}", CALLER, BODY), f"w{index}")
    best = {"credential": float("inf"), "verify": float("inf"), "bind": float("inf")}
    for _ in range(rounds):
        ids = [f"e{index}" for index in range(n)]
        started = time.process_time()
        tokens = [session.credential("call", execution_id, CALLER, BODY) for execution_id in ids]
        best["credential"] = min(best["credential"], (time.process_time() - started) / n * 1e6)
        headers = [[f"Bearer {token}"] for token in tokens]
        started = time.process_time()
        grants = [verifier.verify(header, "call", None) for header in headers]
        best["verify"] = min(best["verify"], (time.process_time() - started) / n * 1e6)
        started = time.process_time()
        for grant, execution_id in zip(grants, ids, strict=True):
            if grant is None or not verifier.bind(grant, execution_id, BODY):
                raise RuntimeError("the worker refused a call")
        best["bind"] = min(best["bind"], (time.process_time() - started) / n * 1e6)
    return best


def session_cost(count: int) -> dict[str, float]:
    """CPU µs of opening one session: the executor's offer (X25519, HKDF, an Ed25519 signature) and the
    worker's check (an Ed25519 verification, X25519, HKDF)."""
    signer = WarmCallSigner.from_pem(new_private_pem())
    verifier = CallVerifier(load_public_keys(signer.public_pem), TOOL)
    started = time.process_time()
    offers = [signer.offer(TOOL, URL, verifier.worker_key)[1] for _ in range(count)]
    offer_us = (time.process_time() - started) / count * 1e6
    started = time.process_time()
    for offer in offers:
        if not verifier.open_session([f"Bearer {offer}"]):
            raise RuntimeError("the worker refused the session")
    return {"offer": offer_us, "open": (time.process_time() - started) / count * 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", type=int, default=20000, help="calls measured per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per step (the best is printed)")
    parser.add_argument("--remembered", default="0,10000,100000", help="calls already taken, comma-separated")
    args = parser.parse_args()
    print(f"per call, CPU µs (best of {args.rounds} rounds of {args.n}); target ≤ {TARGET_US:g} µs per side, flat")
    print(f"{'remembered':>10} {'executor µs':>12} {'worker µs':>10} {'(verify':>8} {'+ bind)':>8}")
    worst = 0.0
    for remembered in (int(item) for item in args.remembered.split(",")):
        costs = measure(args.n, remembered, args.rounds)
        worker = costs["verify"] + costs["bind"]
        worst = max(worst, costs["credential"], worker)
        verify, bind = costs["verify"], costs["bind"]
        print(f"{remembered:>10} {costs['credential']:>12.1f} {worker:>10.1f} {verify:>8.1f} {bind:>8.1f}")
    opening = session_cost(200)
    print(
        f"opening a session (once per executor, worker and hour): offer {opening['offer']:.0f} µs, "
        f"worker {opening['open']:.0f} µs"
    )
    print(f"{'PASS' if worst <= TARGET_US else 'FAIL'}: worst side {worst:.1f} µs per call (target ≤ {TARGET_US:g})")


if __name__ == "__main__":
    main()
