"""Run the whole benchmark: `python -m bench.run` (or `make bench`); results in `docs/performance.md`.

What it measures, side by side in one run (each figure against a bare-aiohttp reference):

- (a) `tools/call` → `CreateTaskResult`: latency p50/p99 with 1 client (sequential) and throughput
  with 32 concurrent clients, against the FLOOR (`bench.baselines floor`: parse JSON, commit one row
  to SQLite with the same durability settings, answer small JSON). Targets: p50 ≤ 2x the floor's,
  throughput ≥ 50% of the floor's.
- (b) `tasks/get` throughput with 32 clients against the CEILING (`bench.baselines echo`: parse JSON,
  answer small JSON). Target: ≥ 50% of the ceiling.
- (c) `tasks/get` latency p50/p99 with 1 client, 1,000 vs 100,000 stored tasks. Target: ≤ 1.2x.

How: every server is its own OS process pinned to one core (the first allowed CPU); the load
generator (`bench.loadgen`, one aiohttp `ClientSession`, keep-alive, limit 32) and this orchestrator
are pinned to another. All servers are started first and stay up (idle ones use no measurable CPU);
the phases then run in `--rounds` interleaved rounds (even rounds in reverse order) so machine noise
and warm-up order hit every phase alike. Latency
samples are pooled over rounds; throughput is the median round. The real gateway is `mcptasks serve`
with `MCPTASKS_MAX_CONCURRENT_TASKS=1` and the bench tool `bench_wait` (always a task, sleeps a day):
the runner starts one sleeping process and leaves every other created task unclaimed, so task
creation is measured without tool processes competing for the CPU (the one process is started
before any measurement). Four real servers are used so that creations never change the stored-task
counts of (c): one seeded with 1,000 completed tasks (`tasks/get` latency and throughput), one with
100,000, one for `tools/call`, and, for information, one for `tools/call` at the default
`MCPTASKS_MAX_CONCURRENT_TASKS=16` with 16 sleeping tool processes already running (their runner
supervisors are what that phase adds).

Every answer is checked; a run with any error is invalid (exit status 1). `--profile` instead runs
the real-server phases once under cProfile and writes the top costs to `bench/results/`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from bench import loadgen, seed, wire

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
PYTHON = sys.executable
SMALL, LARGE = 1_000, 100_000
TARGET_CREATE_P50_X = 2.0
TARGET_CREATE_RPS_SHARE = 0.5
TARGET_GET_RPS_SHARE = 0.5
TARGET_GET_SCALING_X = 1.2
_LISTENING = re.compile(r"http://127\.0\.0\.1:(\d+)/")


# ---------------------------------------------------------------- processes


@dataclass
class Server:
    """One server process under test, and where it listens."""

    name: str
    process: subprocess.Popen[bytes]
    url: str
    log: Path


def _pinned(cpus: set[int] | None) -> Callable[[], None] | None:
    if cpus is None:
        return None
    return lambda: os.sched_setaffinity(0, cpus)


def start_server(
    name: str,
    argv: list[str],
    env: dict[str, str],
    cpus: set[int] | None,
    tmp: Path,
    cwd: Path = REPO,
    timeout_s: float = 30,
) -> Server:
    """Start `argv` in `cwd` (prints `http://127.0.0.1:PORT/` on stdout once listening) pinned to `cpus`.

    Raises:
        RuntimeError: it exited, or was not listening within `timeout_s` seconds (then it is killed).
    """
    out, log = tmp / f"{name}.out", tmp / f"{name}.log"
    with out.open("wb") as stdout, log.open("wb") as stderr:
        # preexec_fn only pins the CPU, and this process runs no threads while it forks.
        pin = _pinned(cpus)
        process = subprocess.Popen(argv, cwd=cwd, env=env, stdout=stdout, stderr=stderr, preexec_fn=pin)  # noqa: PLW1509
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = _LISTENING.search(out.read_text(errors="replace"))
        if found:
            return Server(name, process, f"http://127.0.0.1:{found.group(1)}/mcp", log)
        if process.poll() is not None:
            break
        time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"{name} did not start; see {log}:\n{log.read_text(errors='replace')[-2000:]}")


def stop_server(server: Server) -> None:
    """SIGTERM, then SIGKILL after 20 s."""
    stop_process(server.process)


def stop_process(process: subprocess.Popen[bytes], grace_s: float = 20.0) -> None:
    """SIGTERM a still-running `process`, then SIGKILL it after `grace_s` seconds."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def real_server_argv(data_dir: Path, profile: Path | None = None) -> list[str]:
    """`mcptasks serve` (via `bench.server`) on a free loopback port with the bench tools."""
    profiling = ["--profile", str(profile)] if profile else []
    return [
        *(PYTHON, "-m", "bench.server", *profiling, "serve"),
        *("--tools", str(BENCH_DIR / "tools"), "--data-dir", str(data_dir), "--host", "127.0.0.1", "--port", "0"),
    ]


def real_server_env(max_concurrent_tasks: int = 1) -> dict[str, str]:
    """This environment without `MCPTASKS_*`, plus `MCPTASKS_MAX_CONCURRENT_TASKS` (default INFO logging)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("MCPTASKS_")}
    env["MCPTASKS_MAX_CONCURRENT_TASKS"] = str(max_concurrent_tasks)
    return env


def children(pid: int) -> list[int]:
    """Pids of the live child processes of `pid` (the tool processes of a real server)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == pid and fields[0] != "Z":
                    found.append(int(entry.name))
    return found


@dataclass
class Plan:
    """Sizes of the measured phases."""

    rounds: int = 4
    latency_requests: int = 1000
    latency_warmup: int = 200
    seconds: float = 5.0
    warmup_seconds: float = 1.0


def run_loadgen(
    server: Server,
    kind: str,
    clients: int,
    plan: Plan,
    cpus: set[int] | None,
    tmp: Path,
    ids_file: Path | None = None,
) -> dict[str, Any]:
    """One measured phase in a fresh load-generator process; returns its JSON report plus `samples_s`."""
    samples = tmp / "samples.json"
    argv = [PYTHON, "-m", "bench.loadgen", "--url", server.url, "--kind", kind, "--clients", str(clients)]
    argv += ["--server-pid", str(server.process.pid), "--samples-out", str(samples)]
    if clients == 1:
        argv += ["--requests", str(plan.latency_requests), "--warmup-requests", str(plan.latency_warmup)]
    else:
        argv += ["--seconds", str(plan.seconds), "--warmup-seconds", str(plan.warmup_seconds)]
    if ids_file is not None:
        argv += ["--ids", str(ids_file)]
    pin = _pinned(cpus)
    done = subprocess.run(argv, cwd=REPO, capture_output=True, timeout=300, preexec_fn=pin, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"load generator failed ({kind} → {server.name}):\n{done.stderr.decode()[-3000:]}")
    report: dict[str, Any] = json.loads(done.stdout)
    report["samples_s"] = json.loads(samples.read_text())
    return report


def prime(server: Server, running: int, cpus: set[int] | None, tmp: Path) -> None:
    """Create `running` tasks and wait until the runner has started that many (sleeping) tool processes.

    Spawning a tool process costs CPU on the server's core; doing it before the measurements keeps
    it out of every measured window.
    """
    report = run_loadgen(server, "create", 1, Plan(1, running, 0), cpus, tmp)
    if report["errors"]:
        raise RuntimeError(f"priming {server.name} failed: {report['error_samples']}")
    deadline = time.monotonic() + 60
    while len(children(server.process.pid)) < running:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{server.name}: {running} tool processes did not start; see {server.log}")
        time.sleep(0.1)
    time.sleep(1.0)  # let the interpreters finish starting, then they only sleep


# ---------------------------------------------------------------- phases and figures


@dataclass
class Phase:
    """One measured phase, repeated once per round."""

    key: str
    title: str
    server: str
    kind: str
    clients: int
    ids: str | None = None
    rounds: list[dict[str, Any]] = field(default_factory=list)

    @property
    def samples(self) -> list[float]:
        return [s for r in self.rounds for s in r["samples_s"]]

    def p(self, fraction: float) -> float:
        return loadgen.percentile(self.samples, fraction) * 1000

    @property
    def rps(self) -> float:
        return statistics.median(r["throughput_rps"] for r in self.rounds)

    @property
    def errors(self) -> int:
        return sum(r["errors"] for r in self.rounds)

    def _sum(self, name: str) -> float:
        return sum(r[name] for r in self.rounds)

    @property
    def server_cpu_share(self) -> float:
        return self._sum("cpu_server_s") / self._sum("wall_s")

    @property
    def loadgen_cpu_share(self) -> float:
        return self._sum("cpu_loadgen_s") / self._sum("wall_s")

    @property
    def other_cpu_share(self) -> float:
        other = self._sum("cpu_machine_s") - self._sum("cpu_server_s") - self._sum("cpu_loadgen_s")
        return max(0.0, other) / self._sum("wall_s")

    @property
    def server_cpu_us_per_request(self) -> float:
        return self._sum("cpu_server_s") / max(1, self._sum("requests")) * 1e6


PHASES: list[Phase] = [
    Phase("floor_lat", "floor: JSON → 1 SQLite row", "floor", "floor", 1),
    Phase("create_lat", "`tools/call` → `CreateTaskResult`", "real_create", "create", 1),
    Phase("floor_rps", "floor: JSON → 1 SQLite row", "floor", "floor", 32),
    Phase("create_rps", "`tools/call` → `CreateTaskResult`", "real_create", "create", 32),
    Phase("create16_lat", "`tools/call`, 16 tasks running", "real_create16", "create", 1),
    Phase("create16_rps", "`tools/call`, 16 tasks running", "real_create16", "create", 32),
    Phase("echo_lat", "ceiling: JSON echo", "echo", "echo", 1, ids="small"),
    Phase("echo_rps", "ceiling: JSON echo", "echo", "echo", 32, ids="small"),
    Phase("get_rps", "`tasks/get`, 1,000 tasks stored", "real_small", "get", 32, ids="small"),
    Phase("get_rps_large", "`tasks/get`, 100,000 tasks stored", "real_large", "get", 32, ids="large"),
    Phase("get_lat_small", "`tasks/get`, 1,000 tasks stored", "real_small", "get", 1, ids="small"),
    Phase("get_lat_large", "`tasks/get`, 100,000 tasks stored", "real_large", "get", 1, ids="large"),
]


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def summary_rows(phases: dict[str, Phase]) -> list[list[str]]:
    """The headline table: figure, reference, ratio, target, verdict."""
    create_lat, floor_lat = phases["create_lat"], phases["floor_lat"]
    create_rps, floor_rps = phases["create_rps"], phases["floor_rps"]
    get_rps, echo_rps = phases["get_rps"], phases["echo_rps"]
    small, large = phases["get_lat_small"], phases["get_lat_large"]
    p50_x = create_lat.p(0.5) / floor_lat.p(0.5)
    p99_x = create_lat.p(0.99) / floor_lat.p(0.99)
    create_share = create_rps.rps / floor_rps.rps
    get_share = get_rps.rps / echo_rps.rps
    get_cpu_share = echo_rps.server_cpu_us_per_request / get_rps.server_cpu_us_per_request
    create16_lat, create16_rps = phases["create16_lat"], phases["create16_rps"]
    scale50 = large.p(0.5) / small.p(0.5)
    scale99 = large.p(0.99) / small.p(0.99)
    return [
        [
            "(a) `tools/call` → `CreateTaskResult` p50, 1 client",
            f"{create_lat.p(0.5):.2f} ms",
            f"floor {floor_lat.p(0.5):.2f} ms",
            f"{p50_x:.2f}x",
            f"≤ {TARGET_CREATE_P50_X:.1f}x",
            verdict(p50_x <= TARGET_CREATE_P50_X),
        ],
        [
            "(a) `tools/call` → `CreateTaskResult` p99, 1 client",
            f"{create_lat.p(0.99):.2f} ms",
            f"floor {floor_lat.p(0.99):.2f} ms",
            f"{p99_x:.2f}x",
            "(no target)",
            "info",
        ],
        [
            "(a) `tools/call` → `CreateTaskResult` throughput, 32 clients",
            f"{create_rps.rps:,.0f} req/s",
            f"floor {floor_rps.rps:,.0f} req/s",
            f"{create_share:.0%}",
            f"≥ {TARGET_CREATE_RPS_SHARE:.0%}",
            verdict(create_share >= TARGET_CREATE_RPS_SHARE),
        ],
        [
            "(a, info) same p50 with 16 tool processes running (default concurrency)",
            f"{create16_lat.p(0.5):.2f} ms",
            f"floor {floor_lat.p(0.5):.2f} ms",
            f"{create16_lat.p(0.5) / floor_lat.p(0.5):.2f}x",
            f"≤ {TARGET_CREATE_P50_X:.1f}x",
            f"info ({verdict(create16_lat.p(0.5) / floor_lat.p(0.5) <= TARGET_CREATE_P50_X)})",
        ],
        [
            "(a, info) same throughput with 16 tool processes running (default concurrency)",
            f"{create16_rps.rps:,.0f} req/s",
            f"floor {floor_rps.rps:,.0f} req/s",
            f"{create16_rps.rps / floor_rps.rps:.0%}",
            f"≥ {TARGET_CREATE_RPS_SHARE:.0%}",
            f"info ({verdict(create16_rps.rps / floor_rps.rps >= TARGET_CREATE_RPS_SHARE)})",
        ],
        [
            "(b) `tasks/get` throughput, 32 clients",
            f"{get_rps.rps:,.0f} req/s",
            f"echo {echo_rps.rps:,.0f} req/s",
            f"{get_share:.0%}",
            f"≥ {TARGET_GET_RPS_SHARE:.0%}",
            verdict(get_share >= TARGET_GET_RPS_SHARE),
        ],
        [
            "(b) same, as server CPU per request (echo ÷ `tasks/get`)",
            f"{get_rps.server_cpu_us_per_request:,.0f} µs",
            f"echo {echo_rps.server_cpu_us_per_request:,.0f} µs",
            f"{get_cpu_share:.0%}",
            f"≥ {TARGET_GET_RPS_SHARE:.0%}",
            verdict(get_cpu_share >= TARGET_GET_RPS_SHARE),
        ],
        [
            "(c) `tasks/get` p50, 1 client, 100,000 vs 1,000 tasks",
            f"{large.p(0.5):.2f} ms",
            f"1k: {small.p(0.5):.2f} ms",
            f"{scale50:.2f}x",
            f"≤ {TARGET_GET_SCALING_X:.1f}x",
            verdict(scale50 <= TARGET_GET_SCALING_X),
        ],
        [
            "(c) `tasks/get` p99, 1 client, 100,000 vs 1,000 tasks",
            f"{large.p(0.99):.2f} ms",
            f"1k: {small.p(0.99):.2f} ms",
            f"{scale99:.2f}x",
            f"≤ {TARGET_GET_SCALING_X:.1f}x",
            verdict(scale99 <= TARGET_GET_SCALING_X),
        ],
    ]


def detail_rows(phases: dict[str, Phase]) -> list[list[str]]:
    """One row per phase: absolute figures and where the CPU went."""
    rows = []
    for phase in phases.values():
        rps = [r["throughput_rps"] for r in phase.rounds]
        rows.append(
            [
                phase.title,
                str(phase.clients),
                f"{sum(r['requests'] for r in phase.rounds):,}",
                f"{phase.rps:,.0f}" + (f" ({min(rps):,.0f}-{max(rps):,.0f})" if len(rps) > 1 else ""),
                f"{phase.p(0.5):.2f}",
                f"{phase.p(0.99):.2f}",
                str(phase.errors),
                f"{phase.server_cpu_share:.0%}",
                f"{phase.server_cpu_us_per_request:,.0f}",
                f"{phase.loadgen_cpu_share:.0%}",
                f"{phase.other_cpu_share:.0%}",
            ]
        )
    return rows


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


# ---------------------------------------------------------------- machine


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _filesystem(path: Path) -> str:
    best = ("", "?", "?")
    for line in Path("/proc/mounts").read_text().splitlines():
        device, mount, fstype = line.split()[:3]
        if str(path).startswith(mount) and len(mount) >= len(best[0]):
            best = (mount, fstype, device)
    return f"{best[1]} ({best[2]} on {best[0]})"


def machine(tmp: Path, server_cpus: set[int] | None, load_cpus: set[int] | None) -> list[str]:
    allowed = sorted((server_cpus or set()) | (load_cpus or set())) or sorted(os.sched_getaffinity(0))
    pinning = (
        f"servers on CPU {sorted(server_cpus)}, load generator on CPU {sorted(load_cpus)}"
        if server_cpus and load_cpus
        else "none (fewer than 2 CPUs available): results are not comparable with pinned runs"
    )
    return [
        f"- nproc: {os.cpu_count()} (used: {allowed}); CPU: {_cpu_model()}",
        f"- Linux {platform.release()}; Python {platform.python_version()}; aiohttp {metadata.version('aiohttp')}; "
        f"aiosqlite {metadata.version('aiosqlite')}; SQLite {sqlite3.sqlite_version}",
        f"- data dirs in {tmp}: {_filesystem(tmp)}",
        f"- pinning: {pinning}",
    ]


# ---------------------------------------------------------------- main


@contextlib.contextmanager
def servers_up(
    tmp: Path, cpus: set[int] | None, load_cpus: set[int] | None, ids: dict[str, Path]
) -> Iterator[dict[str, Server]]:
    """Seed the data dirs, start floor, echo and the four real servers; stop them all afterwards."""
    print(f"seeding {SMALL:,} and {LARGE:,} completed tasks…", flush=True)
    for name, count in (("small", SMALL), ("large", LARGE)):
        started = time.monotonic()
        task_ids = seed.seed_sync(tmp / f"real_{name}", count)
        ids[name].write_text(json.dumps(task_ids))
        print(f"  {count:,} tasks in {time.monotonic() - started:.1f} s", flush=True)
    real_env = real_server_env()
    plain_env = dict(os.environ)
    started_servers: dict[str, Server] = {}
    try:
        specs = [
            ("floor", [PYTHON, "-m", "bench.baselines", "floor", "--data-dir", str(tmp / "floor")], plain_env),
            ("echo", [PYTHON, "-m", "bench.baselines", "echo"], plain_env),
            ("real_small", real_server_argv(tmp / "real_small"), real_env),
            ("real_large", real_server_argv(tmp / "real_large"), real_env),
            ("real_create", real_server_argv(tmp / "real_create"), real_env),
            ("real_create16", real_server_argv(tmp / "real_create16"), real_server_env(16)),
        ]
        for name, argv, env in specs:
            started_servers[name] = start_server(name, argv, env, cpus, tmp)
        prime(started_servers["real_create"], 1, load_cpus, tmp)
        prime(started_servers["real_create16"], 16, load_cpus, tmp)
        yield started_servers
    finally:
        for server in started_servers.values():
            stop_server(server)


def measure(args: argparse.Namespace, tmp: Path, server_cpus: set[int] | None, load_cpus: set[int] | None) -> int:
    plan = Plan(args.rounds, args.latency_requests, args.latency_warmup, args.seconds, args.warmup_seconds)
    ids = {"small": tmp / "ids_small.json", "large": tmp / "ids_large.json"}
    phases = {phase.key: phase for phase in PHASES}
    for phase in phases.values():
        phase.rounds.clear()
    with servers_up(tmp, server_cpus, load_cpus, ids) as servers:
        for number in range(1, plan.rounds + 1):
            print(f"round {number}/{plan.rounds}", flush=True)
            order = list(phases.values())
            for phase in order if number % 2 else reversed(order):  # even rounds run backwards: no order bias
                ids_file = ids[phase.ids] if phase.ids else None
                report = run_loadgen(servers[phase.server], phase.kind, phase.clients, plan, load_cpus, tmp, ids_file)
                phase.rounds.append(report)
                print(
                    f"  {phase.key:<14} {report['requests']:>6} req  {report['throughput_rps']:>8,.0f} req/s  "
                    f"p50 {report['p50_ms']:6.2f} ms  p99 {report['p99_ms']:6.2f} ms  errors {report['errors']}"
                    + (f"  {report['error_samples'][:2]}" if report["errors"] else ""),
                    flush=True,
                )
        for name in ("real_create", "real_create16", "real_small", "real_large"):
            log = servers[name].log.read_text(errors="replace")
            if "Traceback" in log or " ERROR " in log:
                print(f"warning: {name} logged errors; see {servers[name].log}", flush=True)

    errors = sum(phase.errors for phase in phases.values())
    section = "\n".join(
        [
            f"### Results ({time.strftime('%Y-%m-%d %H:%M %Z')})",
            "",
            *machine(tmp, server_cpus, load_cpus),
            f"- plan: {plan.rounds} interleaved rounds (even ones in reverse order); "
            f"1 client: {plan.latency_requests} requests per round after "
            f"{plan.latency_warmup} warm-up (latencies pooled); 32 clients: {plan.seconds:g} s per round after "
            f"{plan.warmup_seconds:g} s warm-up (median round); create body {len(wire.create_body(1))} bytes",
            f"- errors: {errors}" + ("" if errors == 0 else " — INVALID RUN"),
            "",
            markdown_table(["measure", "mcp-tasks", "reference", "ratio", "target", "verdict"], summary_rows(phases)),
            "",
            markdown_table(
                [
                    "phase",
                    "clients",
                    "requests",
                    "req/s (median, range)",
                    "p50 ms",
                    "p99 ms",
                    "errors",
                    "server CPU",
                    "server CPU µs/req",
                    "loadgen CPU",
                    "other CPU",
                ],
                detail_rows(phases),
            ),
            "",
            "CPU columns are shares of one core over the measured windows (server: all threads of the server "
            "process; other: everything else on the machine).",
        ]
    )
    print()
    print(section)
    RESULTS_DIR.mkdir(exist_ok=True)
    (RESULTS_DIR / "latest.md").write_text(section + "\n")
    (RESULTS_DIR / "latest.json").write_text(
        json.dumps({k: [{x: y for x, y in r.items() if x != "samples_s"} for r in p.rounds] for k, p in phases.items()})
    )
    print(f"\nwritten to {RESULTS_DIR / 'latest.md'}")
    if errors:
        print("INVALID RUN: some requests failed", file=sys.stderr)
        return 1
    return 0


def profile(args: argparse.Namespace, tmp: Path, server_cpus: set[int] | None, load_cpus: set[int] | None) -> int:
    """Run the real-server phases once each on a fresh server under cProfile; write the top costs."""
    import pstats

    plan = Plan(1, args.latency_requests, args.latency_warmup, args.seconds, args.warmup_seconds)
    ids = {"small": tmp / "ids_small.json", "large": tmp / "ids_large.json"}
    for name, count in (("small", SMALL), ("large", LARGE)):
        ids[name].write_text(json.dumps(seed.seed_sync(tmp / f"real_{name}", count)))
    RESULTS_DIR.mkdir(exist_ok=True)
    targets = [
        ("get_rps", "real_small", "get", 32, "small", 0),
        ("create_rps", "real_create", "create", 32, None, 1),
        ("create_lat", "real_create_lat", "create", 1, None, 1),
        ("create16_rps", "real_create16", "create", 32, None, 16),
        ("create16_lat", "real_create16_lat", "create", 1, None, 16),
        ("get_lat_large", "real_large", "get", 1, "large", 0),
    ]
    for key, data, kind, clients, id_set, running in targets:
        prof = tmp / f"{key}.prof"
        env = real_server_env(max(1, running))
        server = start_server(key, real_server_argv(tmp / data, prof), env, server_cpus, tmp)
        try:
            if running:
                prime(server, running, load_cpus, tmp)
            report = run_loadgen(server, kind, clients, plan, load_cpus, tmp, ids[id_set] if id_set else None)
        finally:
            stop_server(server)
        out = RESULTS_DIR / f"profile-{key}.txt"
        with out.open("w") as stream:
            stream.write(
                f"# {key}: {report['requests']} requests, {report['throughput_rps']:.0f} req/s under cProfile, "
                f"errors {report['errors']}; main thread only (aiosqlite's threads are not profiled)\n"
            )
            stats = pstats.Stats(str(prof), stream=stream).strip_dirs()
            stats.sort_stats("tottime").print_stats(35)
            stats.sort_stats("cumulative").print_stats(45)
        shutil.copy(prof, RESULTS_DIR / f"profile-{key}.prof")
        print(f"{key}: {report['requests']} requests under cProfile → {out}", flush=True)
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4, help="interleaved rounds (default 4)")
    parser.add_argument("--latency-requests", type=int, default=1000, help="1-client requests per round")
    parser.add_argument("--latency-warmup", type=int, default=200, help="1-client warm-up requests per round")
    parser.add_argument("--seconds", type=float, default=5.0, help="32-client measured seconds per round")
    parser.add_argument("--warmup-seconds", type=float, default=1.0, help="32-client warm-up seconds per round")
    parser.add_argument("--quick", action="store_true", help="1 round, 300 requests, 2 s (smoke test)")
    parser.add_argument("--profile", action="store_true", help="profile the real server instead (cProfile)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary data dirs and logs")
    parser.add_argument("--tmp", type=Path, help="parent folder of the temporary data dirs (default: $TMPDIR)")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.latency_requests, args.seconds = 1, 300, 2.0

    allowed = sorted(os.sched_getaffinity(0))
    server_cpus, load_cpus = ({allowed[0]}, {allowed[1]}) if len(allowed) >= 2 else (None, None)
    if load_cpus is not None:
        os.sched_setaffinity(0, load_cpus)  # the orchestrator (and seeding) stays off the servers' core
    else:
        print("warning: fewer than 2 CPUs; server and load generator share the CPU", file=sys.stderr)
    tmp = Path(tempfile.mkdtemp(prefix="mcptasks-bench-", dir=args.tmp))
    try:
        code = (profile if args.profile else measure)(args, tmp, server_cpus, load_cpus)
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(code)


if __name__ == "__main__":
    main()
