"""The reference servers the real gateway is compared with: a FLOOR and a CEILING, bare aiohttp.

    python -m bench.baselines floor --data-dir DIR   # per POST: parse JSON, commit one row, answer small JSON
    python -m bench.baselines echo                   # per POST: parse JSON, answer small JSON

The floor's SQLite has the real store's durability settings (`journal_mode=WAL`, `synchronous=FULL`,
autocommit INSERT through aiosqlite, a `WITHOUT ROWID` table with a 32-hex TEXT key); its row is the
request's `params` as JSON (~340 bytes, like the real store's record body). Both serve with the same
aiohttp `AppRunner(access_log=None)` as `mcptasks serve`, print `listening on http://127.0.0.1:PORT/`
on stdout, and stop on SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiosqlite
from aiohttp import web

DB_KEY = web.AppKey("db", aiosqlite.Connection)


def _answer(request_id: object, result: dict[str, object]) -> web.Response:
    body = json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}, separators=(",", ":"))
    return web.Response(body=body.encode(), content_type="application/json")


async def floor(request: web.Request) -> web.Response:
    """Parse the JSON-RPC body, INSERT one row (committed, fsynced), answer its id."""
    message = json.loads(await request.read())
    row_id = secrets.token_hex(16)
    row = json.dumps(message["params"], separators=(",", ":"), ensure_ascii=False)
    await request.app[DB_KEY].execute(
        "INSERT INTO rows (row_id, created_at_ms, body) VALUES (?, ?, ?)", (row_id, int(time.time() * 1000), row)
    )
    return _answer(message["id"], {"rowId": row_id})


async def echo(request: web.Request) -> web.Response:
    """Parse the JSON-RPC body, answer a small JSON result."""
    message = json.loads(await request.read())
    return _answer(message["id"], {})


def floor_app(data_dir: Path) -> web.Application:
    app = web.Application()

    async def database(app: web.Application) -> AsyncIterator[None]:
        data_dir.mkdir(parents=True, exist_ok=True)
        connection = await aiosqlite.connect(data_dir / "floor.sqlite3", isolation_level=None)
        await connection.execute("PRAGMA busy_timeout = 10000")
        await connection.execute("PRAGMA journal_mode = WAL")
        await connection.execute("PRAGMA synchronous = FULL")
        await connection.execute(
            "CREATE TABLE IF NOT EXISTS rows (row_id TEXT PRIMARY KEY, created_at_ms INTEGER NOT NULL, "
            "body TEXT NOT NULL) WITHOUT ROWID"
        )
        app[DB_KEY] = connection
        try:
            yield
        finally:
            await connection.close()

    app.cleanup_ctx.append(database)
    app.router.add_post("/mcp", floor)
    return app


def echo_app() -> web.Application:
    app = web.Application()
    app.router.add_post("/mcp", echo)
    return app


async def serve(app: web.Application) -> None:
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    print(f"listening on http://127.0.0.1:{port}/", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.baselines")
    parser.add_argument("kind", choices=["floor", "echo"])
    parser.add_argument("--data-dir", type=Path, help="folder of the floor's SQLite file")
    args = parser.parse_args()
    if args.kind == "floor":
        if args.data_dir is None:
            parser.error("floor needs --data-dir")
        asyncio.run(serve(floor_app(args.data_dir)))
    else:
        asyncio.run(serve(echo_app()))


if __name__ == "__main__":
    main()
