"""Task path against FastMCP, and A/B against a baseline commit: `python -m bench.versus_fastmcp` (part of
`make bench`; about 6 minutes: each of three runs of 2026-12-07 on a loaded machine took 5 to 6½ minutes).

Side by side in one run, the embedded server (`mcptasks serve`, `bench_echo` on one warm worker,
bench/tools_warm) of this tree, the same server of a baseline commit (`--baseline REV`, default: the last
release tag, else `origin/main`; `git archive` of that commit, served with this virtual environment), and
FastMCP 4.1.4 with `fastmcp-tasks` 4.1.4 (`bench/fastmcp_server.py`: the same trivial tool, in process, the
extension's defaults). FastMCP is installed by this benchmark into its own virtual environment
(`~/.cache/mcp-tasks/bench-fastmcp`, pip from PyPI), never into this project's.

All get the same bytes from the same client (this process: one aiohttp `ClientSession`, keep-alive) over
the same protocol: MCP 2026-07-28, `tools/call` with the tasks extension declared in `_meta` → a
`CreateTaskResult` (`resultType: "task"`), then `tasks/get` until `completed`. Measures:

- create p50: sequential `tools/call` → `CreateTaskResult`, 1 client, back to back (the tasks run in the
  background meanwhile, on the same core); and the creates of the create → completed phase, each made when
  no task runs.
- `tasks/get` throughput: 32 concurrent clients reading completed tasks.
- create → completed p50: 1 client, `tools/call`, then `tasks/get` back to back until it reads `completed`.
- completed tasks per second, 32 clients: each creates a task, polls it every 10 ms until `completed`,
  and starts the next; and how many `tasks/get` each task took (polls per task, pooled); and the CPU time
  the server used per completed task (its process and its children, the warm worker: `/proc` utime +
  stime over the phase), polls included. The throughput is bound by that CPU (the servers share one
  core), and it wanders far less than the throughput on a shared machine: a cost added on the path shows
  in it first.
- server CPU per task at a fixed load: `FIXED_CLIENTS` clients, each creates a task, waits `FIXED_WAIT_S`
  and reads it (`completed`: one `tasks/get` per task; a task not yet done is read again after another
  wait), `--tasks` tasks per round. The same work per task on every server, nothing saturated: the
  cleanest figure of what a task costs (the 2026-12 Ed25519 credential added 16% to it).
- warm sync p50 and throughput (ours and the baseline only): a plain `tools/call` of the warm tool (no
  tasks extension), 1 client back to back, and 32 clients for `--seconds`. Nothing is subtracted: each
  figure includes every cost of the call (the warm call's credential too), so a cost added anywhere shows
  against the baseline.

Targets (issue 31), each printed as a PASS/FAIL line: completed tasks/s ≥ 2x FastMCP's median and no round
below 0.8x our median; create → completed p50 ≤ FastMCP's; polls per task p50 ≤ 7; against the baseline,
warm sync p50, warm sync throughput and completed tasks/s no worse (within `NOT_WORSE_TOLERANCE`), and server
CPU per task at the fixed load no higher (within `CPU_TOLERANCE`).
A throughput phase whose rounds spread more than 20% around their median (max - min > 0.2 x median) makes
the run NOISY: it is said at the end, and the run does not pass (exit status 1, as for a FAIL).

Servers (and the warm workers) are pinned to the first allowed CPU, the client to the second. The phases
run in `--rounds` (≥ 3) interleaved rounds (server order alternating); latencies are pooled, throughputs are
the median round, printed with their range. Every answer is checked; any error makes the run INVALID
(exit status 1).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import aiohttp

from bench import run, warm, wire
from bench.loadgen import percentile

FASTMCP_VERSION: Final = "4.1.4"
FASTMCP_TASKS_VERSION: Final = "4.1.4"
FASTMCP_VENV: Final = Path.home() / ".cache" / "mcp-tasks" / "bench-fastmcp"
TOOL: Final = warm.TOOL
CLIENTS: Final = 32
POLL_S: Final = 0.010
TARGET_COMPLETED_X: Final = 2.0
"""Completed tasks/s against FastMCP's median (issue 31)."""
TARGET_ROUND_X: Final = 0.8
"""No round of our completed tasks/s below this share of our own median (a run that falls into a slow state)."""
TARGET_TASK_P50_X: Final = 1.0
"""Create → completed p50 against FastMCP's."""
TARGET_POLLS_P50: Final = 7
"""`tasks/get` per task, p50, with 32 clients polling every 10 ms."""
MAX_SPREAD: Final = 0.2
"""Largest spread of a throughput phase's rounds, (max - min) / median, for a run that can pass."""
NOT_WORSE_TOLERANCE: Final = 0.05
"""How much worse than the baseline a figure may be and still be "not worse": 5%, about the median's own
run-to-run wander on a quiet machine (a real regression of the kind issue 31 found is 2x)."""
MIN_ROUNDS: Final = 3
FIXED_CLIENTS: Final = 4
"""Clients of the fixed-load CPU phase: far from saturating one core, so every server does the same work per task."""
FIXED_WAIT_S: Final = 0.030
"""Wait between a create (or an unfinished read) and the next `tasks/get` in the fixed-load CPU phase."""
CPU_TOLERANCE: Final = 0.10
"""How much more CPU per task at the fixed load than the baseline still counts as "not worse": 10%, about twice
the spread of its interleaved rounds on a loaded two-core machine (2026-12-07)."""


# ---------------------------------------------------------------- FastMCP's own environment


def ensure_fastmcp() -> Path:
    """The Python of a virtual environment with FastMCP and fastmcp-tasks at the pinned versions (made once)."""
    python = FASTMCP_VENV / "bin" / "python"
    wanted = f"{FASTMCP_VERSION} {FASTMCP_TASKS_VERSION}"
    probe = "from importlib import metadata as m; print(m.version('fastmcp'), m.version('fastmcp-tasks'))"
    if python.exists():
        found = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=False).stdout.strip()
        if found == wanted:
            return python
    print(f"installing fastmcp {FASTMCP_VERSION} + fastmcp-tasks {FASTMCP_TASKS_VERSION} into {FASTMCP_VENV}")
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(FASTMCP_VENV)], check=True)
    pins = [f"fastmcp=={FASTMCP_VERSION}", f"fastmcp-tasks=={FASTMCP_TASKS_VERSION}"]
    subprocess.run([python, "-m", "pip", "install", "--quiet", *pins], check=True)
    return python


# ---------------------------------------------------------------- the client


class Checked(Exception):
    """An answer failed its check: the run is invalid."""


async def _post(session: aiohttp.ClientSession, url: str, body: bytes, headers: dict[str, str]) -> dict[str, Any]:
    async with session.post(url, data=body, headers=headers) as response:
        raw = await response.read()
    try:
        answer = json.loads(raw)
    except ValueError as exc:
        raise Checked(f"{url}: {response.status} {raw[:300]!r}") from exc
    if response.status != 200 or not isinstance(answer.get("result"), dict):
        raise Checked(f"{url}: {response.status} {raw[:300]!r}")
    return dict(answer["result"])


async def create(session: aiohttp.ClientSession, url: str, number: int) -> str:
    """One `tools/call` of `bench_echo` with the tasks extension; the new task's id."""
    result = await _post(session, url, warm.call_body(number, tasks=True), wire.headers("tools/call", TOOL))
    if result.get("resultType") != "task" or result.get("status") != "working":
        raise Checked(f"{url}: not a CreateTaskResult: {result}")
    return str(result["taskId"])


async def get(session: aiohttp.ClientSession, url: str, task_id: str, number: int) -> dict[str, Any]:
    """One `tasks/get`; its result (a failed or cancelled task fails the run)."""
    result = await _post(session, url, wire.get_body(number, task_id), wire.get_headers(task_id))
    if result.get("taskId") != task_id or result.get("status") in {"failed", "cancelled"}:
        raise Checked(f"{url}: task {task_id}: {result}")
    return result


def _done(result: dict[str, Any], number: int) -> bool:
    if result.get("status") != "completed":
        return False
    text = ((result.get("result") or {}).get("content") or [{}])[0].get("text")
    if text != f"echo r{number}":
        raise Checked(f"unexpected result {result}")
    return True


async def create_latencies(session: aiohttp.ClientSession, url: str, count: int) -> list[float]:
    """`count` sequential creates; their latencies in ms."""
    samples = []
    last = ""
    for number in range(count):
        started = time.perf_counter()
        last = await create(session, url, number)
        samples.append((time.perf_counter() - started) * 1000)
    # The tasks run in the background: the next phase starts once the last one (and so, nearly, all) ended.
    deadline = time.perf_counter() + 120
    while not _done(await get(session, url, last, count - 1), count - 1):
        if time.perf_counter() > deadline:
            raise Checked(f"{url}: task {last} did not complete within 120 s")
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)
    return samples


async def task_latencies(
    session: aiohttp.ClientSession, url: str, count: int, creates: list[float] | None = None
) -> list[float]:
    """`count` tasks, each from its `tools/call` to the first back-to-back `tasks/get` reading `completed`, ms.

    `creates`, if given, receives each create's own latency (ms): a create on a server with no task running.
    """
    samples = []
    for number in range(count):
        started = time.perf_counter()
        task_id = await create(session, url, number)
        if creates is not None:
            creates.append((time.perf_counter() - started) * 1000)
        while not _done(await get(session, url, task_id, number), number):
            pass
        samples.append((time.perf_counter() - started) * 1000)
    return samples


async def _for(duration_s: float, clients: int, one: Callable[[int], Coroutine[Any, Any, int]]) -> float:
    """Run `clients` loops of `one(client)` (each returns how many it did) for `duration_s`; count per second."""
    stop = time.perf_counter() + duration_s
    counts = [0] * clients

    async def client(number: int) -> None:
        while time.perf_counter() < stop:
            counts[number] += await one(number)

    started = time.perf_counter()
    await asyncio.gather(*(client(number) for number in range(clients)))
    return sum(counts) / (time.perf_counter() - started)


async def get_throughput(session: aiohttp.ClientSession, url: str, duration_s: float) -> float:
    """`tasks/get` of completed tasks (one per client) by `CLIENTS` concurrent clients, per second."""
    ids = [await create(session, url, number) for number in range(CLIENTS)]
    for number, task_id in enumerate(ids):
        while not _done(await get(session, url, task_id, number), number):
            await asyncio.sleep(0.005)

    async def one(number: int) -> int:
        result = await get(session, url, ids[number], number)
        if result.get("status") != "completed":
            raise Checked(f"{url}: {result}")
        return 1

    return await _for(duration_s, CLIENTS, one)


async def completed_throughput(
    session: aiohttp.ClientSession, url: str, duration_s: float, polls: list[float] | None = None
) -> float:
    """Tasks completed per second with `CLIENTS` clients, each polling its task every 10 ms.

    `polls`, if given, receives the number of `tasks/get` each completed task took (the last one included).
    """

    async def one(number: int) -> int:
        task_id = await create(session, url, number)
        count = 0
        while True:
            await asyncio.sleep(POLL_S)
            count += 1
            if _done(await get(session, url, task_id, number), number):
                if polls is not None:
                    polls.append(count)
                return 1

    rate = await _for(duration_s, CLIENTS, one)
    await asyncio.sleep(0.5)
    return rate


async def fixed_load_tasks(session: aiohttp.ClientSession, url: str, count: int) -> int:
    """`count` tasks by `FIXED_CLIENTS` clients, each read after `FIXED_WAIT_S` until `completed`; the reads made."""
    started = 0
    reads = 0

    async def client() -> None:
        nonlocal started, reads
        while started < count:
            started += 1
            number = started
            task_id = await create(session, url, number)
            while True:
                await asyncio.sleep(FIXED_WAIT_S)
                reads += 1
                if _done(await get(session, url, task_id, number), number):
                    break

    await asyncio.gather(*(client() for _ in range(FIXED_CLIENTS)))
    return reads


async def sync_call(session: aiohttp.ClientSession, url: str, number: int) -> None:
    """One plain `tools/call` of the warm tool (no tasks extension); its answer checked."""
    result = await _post(session, url, warm.call_body(number, tasks=False), wire.headers("tools/call", TOOL))
    text = (result.get("content") or [{}])[0].get("text")
    if result.get("resultType", "complete") != "complete" or text != f"echo r{number}":
        raise Checked(f"{url}: unexpected synchronous answer {result}")


async def sync_latencies(session: aiohttp.ClientSession, url: str, count: int) -> list[float]:
    """`count` sequential synchronous calls, ms each."""
    samples = []
    for number in range(count):
        started = time.perf_counter()
        await sync_call(session, url, number)
        samples.append((time.perf_counter() - started) * 1000)
    return samples


async def sync_throughput(session: aiohttp.ClientSession, url: str, duration_s: float) -> float:
    """Synchronous calls per second, `CLIENTS` concurrent clients."""

    async def one(number: int) -> int:
        await sync_call(session, url, number)
        return 1

    return await _for(duration_s, CLIENTS, one)


# ---------------------------------------------------------------- phases and report

PHASES: Final = (
    "create_p50",
    "get_rps",
    "task_p50",
    "create_idle_p50",
    "completed_rps",
    "polls",
    "cpu_ms",
    "cpu_fixed_ms",
    "sync_p50",
    "sync_rps",
)
THROUGHPUTS: Final = ("get_rps", "completed_rps", "sync_rps")
BY_ROUND: Final = (*THROUGHPUTS, "cpu_ms", "cpu_fixed_ms")
"""Phases with one figure per round (their median and range are printed), not pooled samples."""
OURS: Final = "mcp-tasks"
BASELINE: Final = "mcp-tasks@baseline"
FASTMCP: Final = "fastmcp"


_TICKS_PER_S: Final = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """CPU time (user + system, s) of process `pid` and of its live children (the warm worker), from `/proc`."""
    total = 0.0
    for each in (pid, *run.children(pid)):
        with contextlib.suppress(OSError, IndexError):
            fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / _TICKS_PER_S
    return total


async def measure(
    urls: dict[str, str], args: argparse.Namespace, pids: dict[str, int] | None = None
) -> dict[str, dict[str, list[float]]]:
    """Warm-up, then `args.rounds` rounds of every phase on each server (server order alternating).

    `pids`: each server's process, whose CPU time per completed task is measured (`cpu_ms`).
    """
    found: dict[str, dict[str, list[float]]] = {name: {phase: [] for phase in PHASES} for name in urls}
    connector = aiohttp.TCPConnector(limit=CLIENTS)
    async with aiohttp.ClientSession(connector=connector) as session:
        for name, url in urls.items():
            await task_latencies(session, url, 50)
            await completed_throughput(session, url, 1.0)
            if name != FASTMCP:
                await sync_latencies(session, url, 50)
        for number in range(args.rounds):
            order = list(urls.items()) if number % 2 == 0 else list(reversed(urls.items()))
            for name, url in order:
                found[name]["create_p50"] += await create_latencies(session, url, args.creates)
                found[name]["get_rps"].append(await get_throughput(session, url, args.seconds))
                idle = found[name]["create_idle_p50"]
                found[name]["task_p50"] += await task_latencies(session, url, args.tasks, idle)
                polls = found[name]["polls"]
                pid = None if pids is None else pids.get(name)
                done_before, cpu_before = len(polls), (0.0 if pid is None else cpu_s(pid))
                found[name]["completed_rps"].append(await completed_throughput(session, url, args.seconds, polls))
                if pid is not None and len(polls) > done_before:
                    found[name]["cpu_ms"].append((cpu_s(pid) - cpu_before) * 1000 / (len(polls) - done_before))
                if pid is not None:
                    cpu_before = cpu_s(pid)
                    await fixed_load_tasks(session, url, args.tasks)
                    found[name]["cpu_fixed_ms"].append((cpu_s(pid) - cpu_before) * 1000 / args.tasks)
                if name != FASTMCP:
                    found[name]["sync_p50"] += await sync_latencies(session, url, args.creates)
                    found[name]["sync_rps"].append(await sync_throughput(session, url, args.seconds))
                print(f"round {number + 1} {name}: done", file=sys.stderr, flush=True)
    return found


def figures(samples: dict[str, list[float]]) -> dict[str, float]:
    """Medians: latency phases pooled (p50), throughput phases by round (phases not measured: NaN)."""
    found: dict[str, float] = {}
    for phase, values in samples.items():
        if not values:
            found[phase] = math.nan
        elif phase in BY_ROUND:
            found[phase] = statistics.median(values)
        else:
            found[phase] = percentile(values, 0.5)
    return found


def spread(rounds: list[float]) -> float:
    """(max - min) / median of a throughput phase's rounds; 0 for fewer than two rounds."""
    if len(rounds) < 2:
        return 0.0
    return (max(rounds) - min(rounds)) / statistics.median(rounds)


@dataclass(frozen=True, slots=True)
class Target:
    """One pass/fail line of the report."""

    what: str
    figure: str
    ok: bool


def targets(found: dict[str, dict[str, list[float]]]) -> list[Target]:
    """The targets of issue 31 on this run's figures (the baseline ones only if a baseline was measured)."""
    figs = {name: figures(samples) for name, samples in found.items()}
    ours, theirs = figs[OURS], figs[FASTMCP]
    completed = found[OURS]["completed_rps"]
    lowest = min(completed)
    lines = [
        Target(
            f"completed tasks/s ≥ {TARGET_COMPLETED_X:g}x FastMCP's median",
            f"{ours['completed_rps']:.0f}/s vs {theirs['completed_rps']:.0f}/s = "
            f"{ours['completed_rps'] / theirs['completed_rps']:.2f}x",
            ours["completed_rps"] >= TARGET_COMPLETED_X * theirs["completed_rps"],
        ),
        Target(
            f"no round of completed tasks/s below {TARGET_ROUND_X:g}x our median",
            f"lowest {lowest:.0f}/s = {lowest / ours['completed_rps']:.2f}x of {ours['completed_rps']:.0f}/s",
            lowest >= TARGET_ROUND_X * ours["completed_rps"],
        ),
        Target(
            "create → completed p50 ≤ FastMCP's",
            f"{ours['task_p50']:.2f} ms vs {theirs['task_p50']:.2f} ms",
            ours["task_p50"] <= TARGET_TASK_P50_X * theirs["task_p50"],
        ),
        Target(
            f"polls per task p50 ≤ {TARGET_POLLS_P50}",
            f"{ours['polls']:.0f} (p90 {percentile(found[OURS]['polls'], 0.9):.0f})",
            ours["polls"] <= TARGET_POLLS_P50,
        ),
    ]
    if BASELINE in figs:
        base = figs[BASELINE]
        worse, better = 1 + NOT_WORSE_TOLERANCE, 1 - NOT_WORSE_TOLERANCE
        lines += [
            Target(
                f"warm sync p50 not worse than the baseline (≤ {worse:g}x)",
                f"{ours['sync_p50']:.2f} ms vs {base['sync_p50']:.2f} ms = {ours['sync_p50'] / base['sync_p50']:.2f}x",
                ours["sync_p50"] <= worse * base["sync_p50"],
            ),
            Target(
                f"warm sync throughput not worse than the baseline (≥ {better:g}x)",
                f"{ours['sync_rps']:.0f}/s vs {base['sync_rps']:.0f}/s = {ours['sync_rps'] / base['sync_rps']:.2f}x",
                ours["sync_rps"] >= better * base["sync_rps"],
            ),
            Target(
                f"server CPU per task at the fixed load not worse than the baseline (≤ {1 + CPU_TOLERANCE:g}x)",
                f"{ours['cpu_fixed_ms']:.2f} ms vs {base['cpu_fixed_ms']:.2f} ms = "
                f"{ours['cpu_fixed_ms'] / base['cpu_fixed_ms']:.2f}x",
                ours["cpu_fixed_ms"] <= (1 + CPU_TOLERANCE) * base["cpu_fixed_ms"],
            ),
            Target(
                f"completed tasks/s not worse than the baseline (≥ {better:g}x)",
                f"{ours['completed_rps']:.0f}/s vs {base['completed_rps']:.0f}/s = "
                f"{ours['completed_rps'] / base['completed_rps']:.2f}x",
                ours["completed_rps"] >= better * base["completed_rps"],
            ),
        ]
    return lines


def noisy(found: dict[str, dict[str, list[float]]]) -> list[str]:
    """One line per throughput phase of any server whose rounds spread more than `MAX_SPREAD`."""
    lines = []
    for name, samples in found.items():
        for phase in THROUGHPUTS:
            rounds = samples[phase]
            if rounds and spread(rounds) > MAX_SPREAD:
                shown = " / ".join(f"{value:.0f}" for value in rounds)
                lines.append(f"{name} {phase}: rounds {shown}/s spread {spread(rounds):.0%} > {MAX_SPREAD:.0%}")
    return lines


def report(found: dict[str, dict[str, list[float]]]) -> str:
    """The table: each server's figures (median and range for throughputs, p50 and p99 for latencies)."""
    names = [name for name in (BASELINE, OURS, FASTMCP) if name in found]
    figs = {name: figures(samples) for name, samples in found.items()}

    def rounds(name: str, phase: str) -> str:
        values = found[name][phase]
        if not values:
            return "—"
        return f"{figs[name][phase]:.0f}/s ({min(values):.0f} to {max(values):.0f}, spread {spread(values):.0%})"

    def p50_p99(name: str, phase: str) -> str:
        if not found[name][phase]:
            return "—"
        return f"{figs[name][phase]:.2f} ms (p99 {percentile(found[name][phase], 0.99):.2f})"

    def polls(name: str, phase: str) -> str:
        values = found[name][phase]
        return f"{figs[name][phase]:.0f} (p90 {percentile(values, 0.9):.0f}, max {max(values):.0f})"

    def cpu(name: str, phase: str) -> str:
        values = found[name][phase]
        if not values:
            return "—"
        return f"{figs[name][phase]:.2f} ms ({min(values):.2f} to {max(values):.2f})"

    def ratio(phase: str, other: str) -> str:
        value = figs[OURS][phase] / figs[other][phase] if other in figs else math.nan
        return "—" if math.isnan(value) else f"{value:.2f}x"

    measures: list[tuple[str, str, Callable[[str, str], str]]] = [
        ("create p50 (1 client, back to back; the tasks run meanwhile)", "create_p50", p50_p99),
        ("create p50 (1 client, no task running)", "create_idle_p50", p50_p99),
        (f"`tasks/get` throughput ({CLIENTS} clients)", "get_rps", rounds),
        ("create → completed p50 (1 client, back-to-back polls)", "task_p50", p50_p99),
        (f"completed tasks/s ({CLIENTS} clients polling every {POLL_S * 1000:g} ms)", "completed_rps", rounds),
        ("`tasks/get` per completed task, p50 (same phase)", "polls", polls),
        ("server CPU per completed task, polls included (same phase; process + warm worker)", "cpu_ms", cpu),
        (
            f"server CPU per task at a fixed load ({FIXED_CLIENTS} clients, one `tasks/get` after "
            f"{FIXED_WAIT_S * 1000:g} ms)",
            "cpu_fixed_ms",
            cpu,
        ),
        ("warm sync `tools/call` p50 (1 client)", "sync_p50", p50_p99),
        (f"warm sync `tools/call` throughput ({CLIENTS} clients)", "sync_rps", rounds),
    ]
    rows = [
        [title, *(show(name, phase) for name in names), ratio(phase, FASTMCP), ratio(phase, BASELINE)]
        for title, phase, show in measures
    ]
    header = ["Measure", *names, "ours / FastMCP", "ours / baseline"]
    return run.markdown_table(header, rows)


def _start_ours(name: str, tree: Path, tmp: Path, cpus: set[int] | None, profile: Path | None) -> run.Server:
    """`mcptasks serve` from source tree `tree` with the warm bench tool, once its warm worker runs."""
    profiling = [] if profile is None else ["--profile", str(profile)]
    argv = [run.PYTHON, "-m", "bench.server", *profiling, "serve", "--tools", str(warm.TOOLS)]
    argv += ["--data-dir", str(tmp / name), "--host", "127.0.0.1", "--port", "0", "--log-level", "WARNING"]
    env = run.real_server_env(16)
    if tree != run.REPO:
        env["PYTHONPATH"] = str(tree)
    server = run.start_server(name, argv, env, cpus, tmp, cwd=tree)
    try:
        warm._until(lambda: run.children(server.process.pid), 30, f"the warm worker of {name}")
    except BaseException:
        run.stop_server(server)
        raise
    return server


@contextlib.contextmanager
def servers(
    tmp: Path,
    fastmcp_python: Path,
    cpus: set[int] | None,
    profile: Path | None = None,
    baseline: Path | None = None,
    tree: Path = run.REPO,
    pids: dict[str, int] | None = None,
) -> Iterator[dict[str, str]]:
    """Our server (and the `baseline` tree's, if given) and FastMCP's, up and pinned to `cpus`; their URLs.

    With `profile`, ours runs under cProfile (`bench.server --profile`) and writes its stats there. `pids`,
    if given, receives each server's process id by name.
    """
    started: list[run.Server] = []
    try:
        if baseline is not None:
            started.append(_start_ours(BASELINE, baseline, tmp, cpus, None))
        started.append(_start_ours(OURS, tree, tmp, cpus, profile))
        env = {key: value for key, value in os.environ.items() if not key.startswith(("FASTMCP_", "MCPTASKS_"))}
        fm_argv = [str(fastmcp_python), str(run.BENCH_DIR / "fastmcp_server.py")]
        started.append(run.start_server(FASTMCP, fm_argv, env, cpus, tmp))
        if pids is not None:
            pids.update({server.name: server.process.pid for server in started})
        yield {server.name: server.url for server in started}
    finally:
        for server in started:
            run.stop_server(server)


def profile_phases(args: argparse.Namespace, tmp: Path, fastmcp_python: Path, cpus: set[int] | None) -> None:
    """Our server under cProfile, one phase per server start; the top costs of each to `bench/results/`."""
    import pstats

    run.RESULTS_DIR.mkdir(exist_ok=True)
    phases: dict[str, Callable[[aiohttp.ClientSession, str], Coroutine[Any, Any, object]]] = {
        "task": lambda session, url: task_latencies(session, url, args.tasks),
        "completed": lambda session, url: completed_throughput(session, url, args.seconds),
    }
    for name, phase in phases.items():
        stats_file = tmp / f"{name}.prof"
        with servers(tmp, fastmcp_python, cpus, stats_file, tree=args.tree) as urls:

            async def drive(url: str = urls[OURS], phase: Any = phase) -> None:
                async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CLIENTS)) as session:
                    await task_latencies(session, url, 20)
                    await phase(session, url)

            asyncio.run(drive())
        out = run.RESULTS_DIR / f"profile-versus-{name}.txt"
        with out.open("w") as stream:
            stats = pstats.Stats(str(stats_file), stream=stream)
            stats.sort_stats("tottime").print_stats(45)
            stats.sort_stats("cumulative").print_stats(80)
        print(f"wrote {out}")


def default_baseline() -> str | None:
    """The last release tag reachable from HEAD (`v*`), else `origin/main`, else `None`."""

    def git(*argv: str) -> str | None:
        done = subprocess.run(["git", *argv], cwd=run.REPO, capture_output=True, text=True, check=False)
        return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else None

    return git("describe", "--tags", "--abbrev=0", "--match", "v*") or git(
        "rev-parse", "--verify", "--quiet", "origin/main"
    )


def baseline_tree(rev: str, tmp: Path) -> tuple[Path, str]:
    """`rev` as a source tree: an existing folder as it is, else the commit unpacked from `git archive`.

    Returns the folder and a label (the folder, or the commit's short hash and its subject).

    Raises:
        SystemExit: `rev` is neither a folder nor a commit of this repository.
    """
    folder = Path(rev)
    if folder.is_dir():
        return folder, str(folder)
    found = subprocess.run(
        ["git", "log", "-1", "--format=%h %s", rev, "--"], cwd=run.REPO, capture_output=True, text=True, check=False
    )
    if found.returncode != 0:
        raise SystemExit(f"--baseline {rev}: neither a folder nor a commit of {run.REPO}")
    tree = tmp / "baseline-tree"
    tree.mkdir()
    archive = subprocess.Popen(["git", "archive", rev], cwd=run.REPO, stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(tree)], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        raise SystemExit(f"git archive {rev} failed")
    return tree, found.stdout.strip()[:100]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.versus_fastmcp", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help=f"interleaved rounds (at least {MIN_ROUNDS})")
    parser.add_argument("--creates", type=int, default=500, help="sequential creates (and sync calls) per round")
    parser.add_argument("--tasks", type=int, default=200, help="create → completed samples per server per round")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each throughput phase")
    parser.add_argument("--quick", action="store_true", help="1 short round (a smoke test; cannot pass)")
    parser.add_argument(
        "--baseline",
        help="the commit (or an unpacked source tree) to A/B against; default: the last release tag (v*), "
        "else origin/main; `none` to skip the A/B",
    )
    parser.add_argument(
        "--tree", type=Path, default=run.REPO, help="the source tree whose server is measured (default: this one)"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="instead: our server under cProfile for 1 round of each phase → bench/results/profile-versus-*.txt",
    )
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.creates, args.tasks, args.seconds = 1, 100, 50, 2.0
    elif args.rounds < MIN_ROUNDS:
        parser.error(f"--rounds must be at least {MIN_ROUNDS} (a median and a range need them)")
    fastmcp_python = ensure_fastmcp()
    allowed = sorted(os.sched_getaffinity(0))
    server_cpus = {allowed[0]} if len(allowed) > 1 else None
    if len(allowed) > 1:
        os.sched_setaffinity(0, {allowed[1]})
    rev = args.baseline if args.baseline is not None else default_baseline()
    with tempfile.TemporaryDirectory(prefix="bench-versus-") as folder:
        tmp = Path(folder)
        if args.profile:
            profile_phases(args, tmp, fastmcp_python, server_cpus)
            return
        baseline, label = (None, "") if rev in {None, "none"} else baseline_tree(rev, tmp)
        try:
            pids: dict[str, int] = {}
            with servers(tmp, fastmcp_python, server_cpus, baseline=baseline, tree=args.tree, pids=pids) as urls:
                found = asyncio.run(measure(urls, args, pids))
        except Checked as exc:
            print(f"INVALID RUN: {exc}", file=sys.stderr)
            sys.exit(1)
    table = report(found)
    lines = targets(found)
    noise = noisy(found)
    head = f"fastmcp {FASTMCP_VERSION} + fastmcp-tasks {FASTMCP_TASKS_VERSION} ({FASTMCP_VENV}); {args.rounds} rounds"
    if baseline is not None:
        head += f"; baseline {rev}: {label}"
    load = os.getloadavg()
    head += f"; load average at the end {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}"
    out = [head, "", table, ""]
    out += [f"{'PASS' if line.ok else 'FAIL'}  {line.what}: {line.figure}" for line in lines]
    if rev is None:
        out.append("NO A/B: no release tag (v*) and no origin/main to compare with; pass --baseline REV")
    elif rev == "none":
        out.append("NO A/B: --baseline none")
    if noise:
        out += ["", "NOISY RUN: these rounds spread too far for any verdict to stand; rerun on a quieter machine:"]
        out += [f"  {line}" for line in noise]
    if args.quick:
        out.append("QUICK RUN: 1 short round, a smoke test; it cannot pass")
    failed = [line for line in lines if not line.ok]
    passed = not failed and not noise and not args.quick and rev not in {None, "none"}
    verdict = "PASS" if passed else "NOISY" if noise and not failed else "FAIL" if failed else "INCOMPLETE"
    out += ["", f"RESULT: {verdict}"]
    text = "\n".join(out)
    print(text)
    run.RESULTS_DIR.mkdir(exist_ok=True)
    (run.RESULTS_DIR / "versus-fastmcp.md").write_text(text + "\n")
    if verdict != "PASS":
        sys.exit(1)


if __name__ == "__main__":
    main()
