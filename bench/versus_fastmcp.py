"""Task path against FastMCP: `python -m bench.versus_fastmcp` (part of `make bench`; about 3 minutes).

Side by side in one run, the embedded server (`mcptasks serve`, `bench_echo` on one warm worker,
bench/tools_warm) and FastMCP 4.1.4 with `fastmcp-tasks` 4.1.4 (`bench/fastmcp_server.py`: the same
trivial tool, in process, the extension's defaults). FastMCP is installed by this benchmark into its own
virtual environment (`~/.cache/mcp-tasks/bench-fastmcp`, pip from PyPI), never into this project's.

Both get the same bytes from the same client (this process: one aiohttp `ClientSession`, keep-alive) over
the same protocol: MCP 2026-07-28, `tools/call` with the tasks extension declared in `_meta` → a
`CreateTaskResult` (`resultType: "task"`), then `tasks/get` until `completed`. Measures:

- create p50: sequential `tools/call` → `CreateTaskResult`, 1 client, back to back (the tasks run in the
  background meanwhile, on the same core); and the creates of the create → completed phase, each made when
  no task runs.
- `tasks/get` throughput: 32 concurrent clients reading completed tasks.
- create → completed p50: 1 client, `tools/call`, then `tasks/get` back to back until it reads `completed`.
- completed tasks per second, 32 clients: each creates a task, polls it every 10 ms until `completed`,
  and starts the next.

Targets (issue 24 item 7): completed tasks per second ≥ 2x FastMCP's; create → completed p50 ≤ FastMCP's.
Servers (and the warm worker) are pinned to the first allowed CPU, the client to the second. The phases
run in `--rounds` interleaved rounds (server order alternating); latencies are pooled, throughputs are the
median round. Every answer is checked; any error fails the run (exit status 1).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Iterator
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
TARGET_TASK_P50_X: Final = 1.0


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


async def completed_throughput(session: aiohttp.ClientSession, url: str, duration_s: float) -> float:
    """Tasks completed per second with `CLIENTS` clients, each polling its task every 10 ms."""

    async def one(number: int) -> int:
        task_id = await create(session, url, number)
        while True:
            await asyncio.sleep(POLL_S)
            if _done(await get(session, url, task_id, number), number):
                return 1

    rate = await _for(duration_s, CLIENTS, one)
    await asyncio.sleep(0.5)
    return rate


# ---------------------------------------------------------------- phases and report

PHASES: Final = ("create_p50", "get_rps", "task_p50", "create_idle_p50", "completed_rps")


async def measure(urls: dict[str, str], args: argparse.Namespace) -> dict[str, dict[str, list[float]]]:
    """Warm-up, then `args.rounds` rounds of every phase on each server (server order alternating)."""
    found: dict[str, dict[str, list[float]]] = {name: {phase: [] for phase in PHASES} for name in urls}
    connector = aiohttp.TCPConnector(limit=CLIENTS)
    async with aiohttp.ClientSession(connector=connector) as session:
        for url in urls.values():
            await task_latencies(session, url, 50)
            await completed_throughput(session, url, 1.0)
        for number in range(args.rounds):
            order = list(urls.items()) if number % 2 == 0 else list(reversed(urls.items()))
            for name, url in order:
                found[name]["create_p50"] += await create_latencies(session, url, args.creates)
                found[name]["get_rps"].append(await get_throughput(session, url, args.seconds))
                idle = found[name]["create_idle_p50"]
                found[name]["task_p50"] += await task_latencies(session, url, args.tasks, idle)
                found[name]["completed_rps"].append(await completed_throughput(session, url, args.seconds))
                print(f"round {number + 1} {name}: done", file=sys.stderr, flush=True)
    return found


def figures(samples: dict[str, list[float]]) -> dict[str, float]:
    """Medians: latency phases pooled (p50), throughput phases by round."""
    return {
        "create_p50": percentile(samples["create_p50"], 0.5),
        "get_rps": statistics.median(samples["get_rps"]),
        "task_p50": percentile(samples["task_p50"], 0.5),
        "create_idle_p50": percentile(samples["create_idle_p50"], 0.5),
        "completed_rps": statistics.median(samples["completed_rps"]),
    }


def report(found: dict[str, dict[str, list[float]]]) -> tuple[str, bool]:
    """The table (each of ours, FastMCP, ratio of the current tree to FastMCP, target, verdict) and whether
    every target was met. A baseline tree (`--baseline`), if measured, gets a column before ours.
    """
    names = [name for name in found if name != "fastmcp"]  # baseline first (if any), then the current tree
    figs = {name: figures(samples) for name, samples in found.items()}
    ours, theirs = figs["mcp-tasks"], figs["fastmcp"]
    completed_x = ours["completed_rps"] / theirs["completed_rps"]
    task_x = ours["task_p50"] / theirs["task_p50"]

    def cells(phase: str, show: Callable[[str], str]) -> list[str]:
        return [show(name) for name in [*names, "fastmcp"]]

    def rounds(name: str, phase: str) -> str:
        return f"{figs[name][phase]:.0f}/s (" + " / ".join(f"{v:.0f}" for v in found[name][phase]) + ")"

    def p50_p99(name: str, phase: str) -> str:
        return f"{figs[name][phase]:.2f} ms (p99 {percentile(found[name][phase], 0.99):.2f})"

    rows = [
        [
            "create p50 (1 client, back to back; the tasks run meanwhile)",
            *cells("create_p50", lambda n: p50_p99(n, "create_p50")),
            f"{ours['create_p50'] / theirs['create_p50']:.2f}x",
            "—",
            "—",
        ],
        [
            "create p50 (1 client, no task running: the creates of the create → completed phase)",
            *cells("create_idle_p50", lambda n: p50_p99(n, "create_idle_p50")),
            f"{ours['create_idle_p50'] / theirs['create_idle_p50']:.2f}x",
            "—",
            "—",
        ],
        [
            f"`tasks/get` throughput ({CLIENTS} clients)",
            *cells("get_rps", lambda n: rounds(n, "get_rps")),
            f"{ours['get_rps'] / theirs['get_rps']:.2f}x",
            "—",
            "—",
        ],
        [
            "create → completed p50 (1 client, back-to-back polls)",
            *cells("task_p50", lambda n: p50_p99(n, "task_p50")),
            f"{task_x:.2f}x",
            f"≤ {TARGET_TASK_P50_X:g}x",
            run.verdict(task_x <= TARGET_TASK_P50_X),
        ],
        [
            f"completed tasks/s ({CLIENTS} clients polling every {POLL_S * 1000:g} ms)",
            *cells("completed_rps", lambda n: rounds(n, "completed_rps")),
            f"{completed_x:.2f}x",
            f"≥ {TARGET_COMPLETED_X:g}x",
            run.verdict(completed_x >= TARGET_COMPLETED_X),
        ],
    ]
    header = ["Measure", *names, "FastMCP", "ratio (mcp-tasks / FastMCP)", "target", "verdict"]
    return run.markdown_table(header, rows), completed_x >= TARGET_COMPLETED_X and task_x <= TARGET_TASK_P50_X


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
) -> Iterator[dict[str, str]]:
    """Our server (and the `baseline` tree's, if given) and FastMCP's, up and pinned to `cpus`; their URLs.

    With `profile`, ours runs under cProfile (`bench.server --profile`) and writes its stats there.
    """
    started: list[run.Server] = []
    try:
        if baseline is not None:
            started.append(_start_ours("mcp-tasks@baseline", baseline, tmp, cpus, None))
        started.append(_start_ours("mcp-tasks", tree, tmp, cpus, profile))
        env = {key: value for key, value in os.environ.items() if not key.startswith(("FASTMCP_", "MCPTASKS_"))}
        fm_argv = [str(fastmcp_python), str(run.BENCH_DIR / "fastmcp_server.py")]
        started.append(run.start_server("fastmcp", fm_argv, env, cpus, tmp))
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
        with servers(tmp, fastmcp_python, cpus, stats_file) as urls:

            async def drive(url: str = urls["mcp-tasks"], phase: Any = phase) -> None:
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


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.versus_fastmcp", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--creates", type=int, default=500, help="sequential creates per server per round")
    parser.add_argument("--tasks", type=int, default=200, help="create → completed samples per server per round")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each throughput phase")
    parser.add_argument("--quick", action="store_true", help="1 short round (a smoke test)")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="also measure the server of this source tree (e.g. `git archive <commit>` unpacked), for before/after",
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
    fastmcp_python = ensure_fastmcp()
    allowed = sorted(os.sched_getaffinity(0))
    server_cpus = {allowed[0]} if len(allowed) > 1 else None
    if len(allowed) > 1:
        os.sched_setaffinity(0, {allowed[1]})
    with tempfile.TemporaryDirectory(prefix="bench-versus-") as folder:
        tmp = Path(folder)
        if args.profile:
            profile_phases(args, tmp, fastmcp_python, server_cpus)
            return
        try:
            with servers(tmp, fastmcp_python, server_cpus, baseline=args.baseline, tree=args.tree) as urls:
                found = asyncio.run(measure(urls, args))
        except Checked as exc:
            print(f"INVALID RUN: {exc}", file=sys.stderr)
            sys.exit(1)
    table, met = report(found)
    print(f"fastmcp {FASTMCP_VERSION} + fastmcp-tasks {FASTMCP_TASKS_VERSION} ({FASTMCP_VENV}); {args.rounds} rounds")
    print(table)
    run.RESULTS_DIR.mkdir(exist_ok=True)
    (run.RESULTS_DIR / "versus-fastmcp.md").write_text(table + "\n")
    if not met:
        print("(a MISS is reported, not fatal)", file=sys.stderr)


if __name__ == "__main__":
    main()
