"""McpServer overhead benchmark: `python -m bench.mcp_servers` (part of `make bench`).

The per-call overhead of serving an existing MCP server's tool through mcp-tasks, against calling the server
directly with the official SDK client (`mcp.Client`, the same client on both sides), for `mcp-server-time`
2026.10.19 (PyPI, stdio; installed by `tests.mcp_servers` into its own venv) and its `get_current_time`:

- (s1) per call: direct = a fresh server and connection per call (start, handshake, call, stop); through
  mcp-tasks = a synchronous `tools/call` of the McpServer tool without `warm` (the runner starts the bridge,
  which starts the server, for each call).
- (s2) warm: direct = one connection, calls one after another; through mcp-tasks = a synchronous `tools/call`
  of the McpServer tool with `warm: {minWorkers: 1}` (one bridge holding one server connection).
- (s3) a task: `tools/call` with the tasks extension to the first `tasks/get` that reads `completed`
  (the SDK client with `mcp_tasks.client`, polling every `pollIntervalMs`: 10 here), per call and warm.

Figures only, no target: the per-call figure is dominated by starting two interpreters (bridge and server).
One client, sequential; every answer is checked (the timezone comes back), any error fails the run.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import yaml
from mcp import Client, StdioServerParameters

from bench import run
from bench.loadgen import percentile
from mcp_tasks.client import TasksClientExtension
from tests.mcp_servers import time_command

TOOL = "get_current_time"
ARGUMENTS = {"timezone": "Europe/Warsaw"}


def _checked(result: Any) -> None:
    structured = getattr(result, "structured_content", None) or {}
    if structured.get("timezone") != ARGUMENTS["timezone"]:
        raise RuntimeError(f"unexpected answer: {result}")


async def _timed(count: int, call: Callable[[], Awaitable[None]]) -> list[float]:
    latencies = []
    for _ in range(count):
        start = time.perf_counter()
        await call()
        latencies.append((time.perf_counter() - start) * 1000)
    return latencies


async def direct(command: list[str], per_call: int, warm: int) -> dict[str, list[float]]:
    """(s1) and (s2) against the server itself."""
    server = StdioServerParameters(command=command[0], args=command[1:])

    async def fresh() -> None:
        async with Client(server, cache=None) as client:
            _checked(await client.call_tool(TOOL, ARGUMENTS))

    figures = {"per call": await _timed(per_call, fresh)}
    async with Client(server, cache=None) as client:

        async def again() -> None:
            _checked(await client.call_tool(TOOL, ARGUMENTS))

        await _timed(5, again)
        figures["warm"] = await _timed(warm, again)
    return figures


async def through(url: str, per_call: int, warm: int, tasks: int) -> dict[str, list[float]]:
    """(s1), (s2) and (s3) through mcp-tasks."""
    figures: dict[str, list[float]] = {}
    async with Client(url, cache=None) as client:
        for label, name, count in (("per call", f"p_{TOOL}", per_call), ("warm", f"w_{TOOL}", warm)):

            async def call(name: str = name) -> None:
                _checked(await client.call_tool(name, ARGUMENTS))

            await _timed(3, call)
            figures[label] = await _timed(count, call)
    async with Client(url, cache=None, extensions=[TasksClientExtension()]) as client:
        for label, name in (("task, per call", f"p_{TOOL}"), ("task, warm", f"w_{TOOL}")):

            async def task(name: str = name) -> None:
                _checked(await client.call_tool(name, ARGUMENTS))

            figures[label] = await _timed(tasks, task)
    return figures


def _row(label: str, latencies: list[float], floor: list[float] | None) -> list[str]:
    p50 = statistics.median(latencies)
    extra = f"{p50 - statistics.median(floor):+.1f}" if floor else ""
    return [label, str(len(latencies)), f"{p50:.1f}", f"{percentile(latencies, 0.99):.1f}", extra]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-call", type=int, default=20, help="per-call calls each way (default 20)")
    parser.add_argument("--warm", type=int, default=200, help="warm calls each way (default 200)")
    parser.add_argument("--tasks", type=int, default=20, help="task calls each way (default 20)")
    args = parser.parse_args()
    command = time_command()
    with tempfile.TemporaryDirectory(prefix="bench-mcp-servers-") as folder:
        tmp = Path(folder)
        tools = tmp / "tools"
        tools.mkdir()
        documents = [
            {
                "apiVersion": "mcptasks.io/v1alpha1",
                "kind": "McpServer",
                "metadata": {"name": name},
                "spec": {
                    "container": {"command": command},
                    "toolNamePrefix": prefix,
                    "toolDefaults": {"execution": {"pollIntervalMs": 10}},  # (s3) follows the task this often
                    **extra,
                },
            }
            for name, prefix, extra in (("time", "p_", {}), ("time-warm", "w_", {"warm": {"minWorkers": 1}}))
        ]
        (tools / "time.yaml").write_text(yaml.safe_dump_all(documents))
        argv = [run.PYTHON, "-m", "mcp_tasks.cli", "serve", "--tools", str(tools), "--data-dir", str(tmp / "data")]
        argv += ["--host", "127.0.0.1", "--port", "0", "--log-level", "WARNING"]
        floor = asyncio.run(direct(command, args.per_call, args.warm))
        server = run.start_server("gateway", argv, run.real_server_env(4), None, tmp, timeout_s=120)
        try:
            served = asyncio.run(through(server.url, args.per_call, args.warm, args.tasks))
        finally:
            run.stop_server(server)
    rows = [_row(f"direct, {label}", latencies, None) for label, latencies in floor.items()]
    rows += [
        _row(f"mcp-tasks, {label}", latencies, floor.get(label.removeprefix("task, ")))
        for label, latencies in served.items()
    ]
    print("McpServer overhead: mcp-server-time get_current_time, official SDK client, sequential (ms)")
    print(run.markdown_table(["path", "calls", "p50", "p99", "p50 over direct"], rows))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
