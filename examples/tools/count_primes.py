"""count_primes: long-running work that reports progress (`ctx.progress`: the task's `statusMessage`, or
`notifications/progress` to a synchronous call that sent a `progressToken`).

Counts the primes below `limit` with a segmented, odd-only sieve of Eratosthenes: memory stays at one
segment whatever the limit, and each prime crosses off its multiples with a single bytearray slice
assignment. Progress is reported at most every half second, so the status never floods the store.
Returns a `CallToolResult` dict with text and `structuredContent` matching the manifest's `outputSchema`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from mcp_tasks.runtime import ToolContext, run

SEGMENT_ODDS = 1 << 20  # odd numbers per segment: a 1 MiB bytearray covering 2 MiB of integers
REPORT_EVERY_S = 0.5


def _small_primes(bound: int) -> list[int]:
    """Odd primes p with p <= bound (plain sieve; bound is at most sqrt(limit))."""
    if bound < 3:
        return []
    sieve = bytearray([1]) * (bound + 1)
    sieve[0:2] = b"\x00\x00"
    for p in range(2, math.isqrt(bound) + 1):
        if sieve[p]:
            sieve[p * p :: p] = bytes(len(range(p * p, bound + 1, p)))
    return [p for p in range(3, bound + 1, 2) if sieve[p]]


def count_primes_below(limit: int, progress: Callable[[int], None] = lambda done: None) -> int:
    """pi(limit - 1): the number of primes p < limit. `progress(n)` is called after each segment."""
    if limit <= 2:
        return 0
    base = _small_primes(math.isqrt(limit - 1))
    count = 1  # the prime 2; the sieve below only holds odd numbers
    low = 3
    while low < limit:
        high = min(low + 2 * SEGMENT_ODDS, limit)  # segment holds the odd numbers in [low, high)
        size = (high - low + 1) // 2
        segment = bytearray([1]) * size
        for p in base:
            square = p * p
            if square >= high:
                break
            first = max(square, (low + p - 1) // p * p)
            if first % 2 == 0:
                first += p  # odd multiples only
            start = (first - low) // 2  # consecutive odd multiples are 2p apart: index step p
            if start < size:
                segment[start::p] = bytes((size - 1 - start) // p + 1)
        count += segment.count(1)
        low = high if high % 2 else high + 1
        progress(min(low, limit))
    return count


def main(ctx: ToolContext) -> dict[str, Any]:
    limit = int(ctx.arguments["limit"])
    last_report = 0.0

    def progress(done: int) -> None:
        nonlocal last_report
        now = time.monotonic()
        if now - last_report >= REPORT_EVERY_S:
            last_report = now
            ctx.progress(done, limit, f"sieved {done * 100 // limit}% ({done} of {limit})")

    ctx.report(f"sieving the numbers below {limit}")
    prime_count = count_primes_below(limit, progress)
    ctx.progress(limit, limit, f"sieved 100% ({limit} of {limit})")
    return {
        "content": [{"type": "text", "text": f"There are {prime_count} primes below {limit}."}],
        "structuredContent": {"limit": limit, "primeCount": prime_count},
    }


if __name__ == "__main__":
    run(main)
