"""The load generator: one process, one aiohttp `ClientSession` (keep-alive, connection limit 32).

    python -m bench.loadgen --url URL --kind create|get|floor|echo --clients N
                            (--requests N | --seconds S) [--warmup-requests N | --warmup-seconds S]
                            [--ids FILE] [--server-pid PID]

`--clients 1` sends requests one after another (latency); `--clients 32` runs 32 concurrent
request loops (throughput). Every answer is checked (`bench.wire`); a failed check or an exception
counts as an error. Prints one JSON object on stdout: request count, wall time, per-request
latencies' percentiles, errors (with the first few reasons), and the CPU seconds used during the
measured window by this process, by `--server-pid` (all its threads) and by the whole machine (/proc).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from bench import wire

Check = Callable[[int, bytes, int, str | None], bool]
_TICKS = os.sysconf("SC_CLK_TCK")


def percentile(samples: list[float], fraction: float) -> float:
    """Nearest-rank percentile of `samples` (unsorted), e.g. `fraction=0.99`."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def process_cpu_s(pid: int) -> float:
    """utime + stime of process `pid` (all threads), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def machine_busy_s() -> float:
    """Busy CPU seconds of the whole machine, all cores (/proc/stat: everything but idle and iowait)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / _TICKS


class Load:
    """Builds request `n` of one kind and knows how to check its answer."""

    def __init__(self, kind: str, ids: list[str], seed: int) -> None:
        self.kind = kind
        self.ids = ids
        self.random = random.Random(seed)
        self.check: Check = {
            "create": wire.check_create,
            "get": wire.check_get,
            "floor": wire.check_floor,
            "echo": wire.check_echo,
        }[kind]
        if kind in {"get", "echo"} and not ids:
            raise SystemExit(f"--kind {kind} needs --ids")

    def request(self, n: int) -> tuple[bytes, dict[str, str], str | None]:
        if self.kind in {"create", "floor"}:
            return wire.create_body(n), wire.CREATE_HEADERS, None
        task_id = self.random.choice(self.ids)
        return wire.get_body(n, task_id), wire.get_headers(task_id), task_id


async def drive(args: argparse.Namespace) -> dict[str, Any]:
    ids = json.loads(Path(args.ids).read_text()) if args.ids else []
    load = Load(args.kind, ids, args.seed)
    numbers = itertools.count(1)
    errors: list[str] = []
    error_count = 0
    completions: list[tuple[float, float]] = []  # (finished at, latency s)
    by_count = args.requests is not None
    warmup_n = args.warmup_requests if by_count else 0
    measure_n = args.requests or 0
    window: dict[str, float] = {}
    connector = aiohttp.TCPConnector(limit=32, force_close=False)
    timeout = aiohttp.ClientTimeout(total=30)

    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def one() -> None:
            nonlocal error_count
            n = next(numbers)
            body, headers, task_id = load.request(n)
            started = time.perf_counter()
            try:
                async with session.post(args.url, data=body, headers=headers) as response:
                    status = response.status
                    raw = await response.read()
            except (aiohttp.ClientError, TimeoutError) as exc:
                error_count += 1
                if len(errors) < 5:
                    errors.append(f"{type(exc).__name__}: {exc}")
                return
            finished = time.perf_counter()
            if not load.check(status, raw, n, task_id):
                error_count += 1
                if len(errors) < 5:
                    errors.append(f"HTTP {status}: {raw[:300]!r}")
                return
            completions.append((finished, finished - started))

        def open_window() -> None:
            window["start"] = time.perf_counter()
            window["cpu_self"] = time.process_time()
            window["cpu_server"] = process_cpu_s(args.server_pid) if args.server_pid else 0.0
            window["cpu_machine"] = machine_busy_s()

        def close_window() -> None:
            window["end"] = time.perf_counter()
            window["cpu_self_end"] = time.process_time()
            window["cpu_server_end"] = process_cpu_s(args.server_pid) if args.server_pid else 0.0
            window["cpu_machine_end"] = machine_busy_s()

        if by_count:
            # A fixed number of requests (sequential when clients == 1) after a sequential warm-up.
            for _ in range(warmup_n):
                await one()
            completions.clear()
            remaining = measure_n

            async def loop_n() -> None:
                nonlocal remaining
                while remaining > 0:
                    remaining -= 1
                    await one()

            open_window()
            await asyncio.gather(*(loop_n() for _ in range(args.clients)))
            close_window()
            measured = completions
        else:
            # Fixed duration: `clients` loops run through warm-up and window; only completions inside count.
            t0 = time.perf_counter()
            start_at, end_at = t0 + args.warmup_seconds, t0 + args.warmup_seconds + args.seconds

            async def loop_t() -> None:
                while time.perf_counter() < end_at:
                    await one()

            async def clock() -> None:
                await asyncio.sleep(max(0.0, start_at - time.perf_counter()))
                open_window()
                await asyncio.sleep(max(0.0, end_at - time.perf_counter()))
                close_window()

            await asyncio.gather(clock(), *(loop_t() for _ in range(args.clients)))
            measured = [c for c in completions if window["start"] <= c[0] < window["end"]]

    wall_s = window["end"] - window["start"]
    latencies = [latency for _, latency in measured]
    return {
        "kind": args.kind,
        "clients": args.clients,
        "requests": len(measured),
        "wall_s": wall_s,
        "throughput_rps": len(measured) / wall_s if wall_s > 0 else 0.0,
        "p50_ms": percentile(latencies, 0.50) * 1000 if latencies else math.nan,
        "p99_ms": percentile(latencies, 0.99) * 1000 if latencies else math.nan,
        "mean_ms": sum(latencies) / len(latencies) * 1000 if latencies else math.nan,
        "errors": error_count,
        "error_samples": errors,
        "cpu_loadgen_s": window["cpu_self_end"] - window["cpu_self"],
        "cpu_server_s": window["cpu_server_end"] - window["cpu_server"],
        "cpu_machine_s": window["cpu_machine_end"] - window["cpu_machine"],
        "samples_s": latencies,
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.loadgen")
    parser.add_argument("--url", required=True)
    parser.add_argument("--kind", required=True, choices=["create", "get", "floor", "echo"])
    parser.add_argument("--clients", type=int, default=1)
    parser.add_argument("--requests", type=int, help="measure a fixed number of requests")
    parser.add_argument("--warmup-requests", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=5.0, help="measure a fixed duration (without --requests)")
    parser.add_argument("--warmup-seconds", type=float, default=1.0)
    parser.add_argument("--ids", help="JSON list of task ids to request (get, echo)")
    parser.add_argument("--server-pid", type=int, help="report this process's CPU time over the window")
    parser.add_argument("--seed", type=int, default=20260728)
    parser.add_argument("--samples-out", help="also write the measured latencies (seconds) as a JSON list here")
    args = parser.parse_args()
    if not 1 <= args.clients <= 32:
        parser.error("--clients must be 1..32 (one session, connection limit 32)")
    result = asyncio.run(drive(args))
    samples = result.pop("samples_s")
    if args.samples_out:
        Path(args.samples_out).write_text(json.dumps(samples))
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
