"""Per-step cost of the `tools/call` (task creation) and `tasks/get` paths, without a profiler's distortion.

    python -m bench.breakdown [--n 3000]

Calls the real functions the gateway calls for one request, each step many times in a row, on one
pinned core, and prints wall and CPU microseconds per call (CPU is `process_time`: all threads, so
aiosqlite's worker thread is included). A companion of `bench.run --profile` for
`docs/performance.md`: cProfile shows *where* the main thread spends time; this shows *how much*
each step costs on its own. Steps overlap nothing and are not additive to the end-to-end figures
(HTTP parsing, the event loop and socket I/O are not in them).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sqlite3
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench import seed, wire
from mcp_tasks.protocol import jsonrpc
from mcp_tasks.protocol.headers import validate_envelope
from mcp_tasks.protocol.models import CreateTaskResult, TaskRequestParams
from mcp_tasks.store.manifests import load_manifest_file
from mcp_tasks.store.sqlite import SqliteTaskStore
from mcp_tasks.store.sqlite import store as sqlite_store
from mcp_tasks.tasks import transitions
from mcp_tasks.tasks.ids import mint_task_id
from mcp_tasks.tasks.owner import LOCAL_OWNER
from mcp_tasks.tasks.record import iso_ms

Row = tuple[str, float, float]


def timed(label: str, n: int, step: Callable[[], object]) -> Row:
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(n):
        step()
    return label, (time.perf_counter() - wall) / n * 1e6, (time.process_time() - cpu) / n * 1e6


async def timed_async(label: str, n: int, step: Callable[[], Awaitable[object]]) -> Row:
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(n):
        await step()
    return label, (time.perf_counter() - wall) / n * 1e6, (time.process_time() - cpu) / n * 1e6


def envelope(body: bytes, headers: dict[str, str]) -> Callable[[], object]:
    def step() -> object:
        message = jsonrpc.parse_message(jsonrpc.decode_body(body))
        return validate_envelope(headers, message)

    return step


async def measure(n: int, tmp: Path) -> tuple[list[Row], list[Row]]:
    ids = await seed.seed(tmp / "get", 1000)
    (tool,) = load_manifest_file(seed.TOOLS_DIR / "bench_tools.yaml")
    task_id = ids[500]
    get_body, get_headers = wire.get_body(1, task_id), wire.get_headers(task_id)
    create_body = wire.create_body(1)
    arguments = json.loads(create_body)["params"]["arguments"]

    get_rows: list[Row] = []
    store = SqliteTaskStore(tmp / "get" / "tasks.sqlite3")
    await store.open()
    try:
        record = await store.get(task_id, LOCAL_OWNER)
        plain = sqlite3.connect(tmp / "get" / "tasks.sqlite3")
        select = f"SELECT {sqlite_store._COLUMNS} FROM tasks WHERE task_id = ?"
        row = plain.execute(select, (task_id,)).fetchall()[0]
        response = jsonrpc.result_response(1, record.to_wire_task().to_wire())
        get_rows += [
            timed("JSON decode + JSON-RPC parse + `_meta`/header checks", n, envelope(get_body, get_headers)),
            timed(
                "`TaskRequestParams.model_validate` (pydantic)",
                n,
                lambda: TaskRequestParams.model_validate(json.loads(get_body)["params"]),
            ),
            await timed_async(
                "`SqliteTaskStore.get` (aiosqlite, whole call)", n, lambda: store.get(task_id, LOCAL_OWNER)
            ),
            await timed_async(
                "  of which: aiosqlite round trip of `SELECT 1`", n, lambda: store._r.execute_fetchall("SELECT 1")
            ),
            timed(
                "  of which: the same SELECT on plain sqlite3, same thread",
                n,
                lambda: plain.execute(select, (task_id,)).fetchall(),
            ),
            timed("  of which: `_decode_row` (JSON body → `TaskRecord`)", n, lambda: sqlite_store._decode_row(row)),
            timed("`to_wire_task().to_wire()` (pydantic `DetailedTask`)", n, lambda: record.to_wire_task().to_wire()),
            timed(
                "  of which: 2 x `iso_ms` (strftime)",
                n,
                lambda: (iso_ms(record.created_at), iso_ms(record.last_updated_at)),
            ),
            timed(
                "  vs 2 x `isoformat(timespec='milliseconds')`",
                n,
                lambda: (
                    record.created_at.isoformat(timespec="milliseconds"),
                    record.last_updated_at.isoformat(timespec="milliseconds"),
                ),
            ),
            timed(
                "response `json.dumps` (as `transport._json`)",
                n,
                lambda: json.dumps(response, separators=(",", ":"), ensure_ascii=False).encode(),
            ),
        ]
        plain.close()
    finally:
        await store.aclose()

    create_rows: list[Row] = []
    store = SqliteTaskStore(tmp / "create" / "tasks.sqlite3")
    await store.open()
    handler = logging.StreamHandler(open(tmp / "server.log", "a"))  # noqa: SIM115  # closed below
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("mcp_tasks.gateway")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        now = store.clock()
        record = transitions.new_task(mint_task_id(), LOCAL_OWNER, tool, arguments, now)
        create_rows += [
            timed(
                "JSON decode + JSON-RPC parse + `_meta`/header checks", n, envelope(create_body, wire.CREATE_HEADERS)
            ),
            timed(
                "`ToolSpec.argument_errors` (jsonschema, valid arguments)", n, lambda: tool.argument_errors(arguments)
            ),
            timed("`mint_task_id` (`secrets.token_hex(16)` → getrandom)", n, mint_task_id),
            timed(
                "`transitions.new_task` + row encoding (`_row_values`)",
                n,
                lambda: store._row_values(transitions.new_task(mint_task_id(), LOCAL_OWNER, tool, arguments, now), 1),
            ),
        ]

        async def create() -> object:
            return await store.create(transitions.new_task(mint_task_id(), LOCAL_OWNER, tool, arguments, now))

        create_rows.append(
            await timed_async(
                "`SqliteTaskStore.create` (INSERT + COMMIT + fsync, whole call)", max(200, n // 5), create
            )
        )
        extra = {"taskId": record.task_id, "tool": tool.name, "tenant": LOCAL_OWNER.tenant_hash}
        create_rows += [
            timed(
                "`logger.info('task created')` (text line to a file)",
                n,
                lambda: logger.info("task created", extra=extra),
            ),
            timed(
                "`CreateTaskResult(...).to_wire()` (pydantic)",
                n,
                lambda: CreateTaskResult(
                    task_id=record.task_id,
                    status=record.status,
                    created_at=iso_ms(record.created_at),
                    last_updated_at=iso_ms(record.last_updated_at),
                    ttl_ms=record.ttl_ms,
                    poll_interval_ms=record.poll_interval_ms,
                ).to_wire(),
            ),
        ]
    finally:
        logger.removeHandler(handler)
        handler.close()
        await store.aclose()
    return get_rows, create_rows


def table(title: str, rows: list[Row]) -> str:
    lines = [f"| {title} | wall µs/call | CPU µs/call |", "|---|---|---|"]
    lines += [f"| {label} | {wall:,.1f} | {cpu:,.1f} |" for label, wall, cpu in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.breakdown")
    parser.add_argument("--n", type=int, default=3000, help="calls per step")
    args = parser.parse_args()
    allowed = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {allowed[0]})
    with tempfile.TemporaryDirectory(prefix="mcptasks-breakdown-") as tmp:
        get_rows, create_rows = asyncio.run(measure(args.n, Path(tmp)))
    out: Any = "\n\n".join([table("`tasks/get` step", get_rows), table("`tools/call` (task) step", create_rows)])
    print(out)


if __name__ == "__main__":
    main()
