"""Benchmarks of the embedded server (not tests): `python -m bench.run`, results in `docs/performance.md`.

`run` orchestrates; `loadgen` is the aiohttp-client load generator (its own process); `baselines` holds
the bare aiohttp floor (JSON → one durable SQLite row) and ceiling (JSON echo); `server` starts the real
gateway (`mcptasks serve`), optionally under cProfile; `seed` bulk-loads completed tasks; `wire` builds
the MCP 2026-07-28 requests and checks the answers. Nothing here is imported by `mcp_tasks`.
"""
