"""CPU per warm call of its credential, each side, and how the worker's replay memory scales.

    python -m bench.call_auth [--n 5000] [--remembered 0,10000,40000]

Calls the real functions: the executor's `WarmCallSigner.mint` and the worker's `CallVerifier.verify`
and `bind`, one call after another on one thread, and prints CPU microseconds per call
(`process_time`). With `--remembered N` the worker already holds N unexpired credentials (300 warm
calls/s reach 40,000 in about two minutes): `bind` must cost the same at any N (issue 31).
"""

from __future__ import annotations

import argparse
import time

from mcp_tasks.runtime.call_auth import CallVerifier, load_public_keys
from mcp_tasks.worker.warm_auth import WarmCallSigner, new_private_pem

TOOL = "bench"
BODY = b'{"executionId": "e", "arguments": {}}'


def _per_call_us(started: float, n: int) -> float:
    return (time.process_time() - started) / n * 1e6


def measure(n: int, remembered: int) -> dict[str, float]:
    """CPU µs per call of `mint`, `verify` and `bind` with `remembered` credentials already taken."""
    signer = WarmCallSigner.from_pem(new_private_pem())
    verifier = CallVerifier(load_public_keys(signer.public_pem), TOOL)
    for index in range(remembered):
        grant = verifier.verify([f"Bearer {signer.mint(TOOL, f'w{index}', 'call', 'c', BODY)}"], "call", None)
        assert grant is not None and verifier.bind(grant, f"w{index}", BODY)
    started = time.process_time()
    tokens = [signer.mint(TOOL, f"e{index}", "call", "c", BODY) for index in range(n)]
    mint_us = _per_call_us(started, n)
    started = time.process_time()
    grants = [verifier.verify([f"Bearer {token}"], "call", None) for token in tokens]
    verify_us = _per_call_us(started, n)
    started = time.process_time()
    for index, grant in enumerate(grants):
        assert grant is not None and verifier.bind(grant, f"e{index}", BODY)
    bind_us = _per_call_us(started, n)
    return {"mint": mint_us, "verify": verify_us, "bind": bind_us}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5000, help="calls measured per step")
    parser.add_argument("--remembered", default="0,10000,40000", help="credentials already taken, comma-separated")
    args = parser.parse_args()
    print(f"{'remembered':>10} {'mint µs':>9} {'verify µs':>10} {'bind µs':>8}")
    for remembered in (int(item) for item in args.remembered.split(",")):
        costs = measure(args.n, remembered)
        print(f"{remembered:>10} {costs['mint']:>9.1f} {costs['verify']:>10.1f} {costs['bind']:>8.1f}")


if __name__ == "__main__":
    main()
