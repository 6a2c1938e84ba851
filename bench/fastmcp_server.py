"""The FastMCP reference server of `bench.versus_fastmcp`: FastMCP with `fastmcp-tasks`, tools in process.

Run by the benchmark with the Python of its own virtual environment (`bench.versus_fastmcp.ensure_fastmcp`,
never a dependency of this project): `python bench/fastmcp_server.py`. It serves the same trivial tool as
`bench/tools_warm/bench_echo.yaml` (`bench_echo`: returns `"echo " + text` at once; it may run as a task)
on `/mcp` of a free loopback port, with the tasks extension's defaults (`memory://` backend, docket's
in-process worker), stateless HTTP, uvicorn without access log, and prints `http://127.0.0.1:PORT/` once
it listens. Standard library plus FastMCP only: it must not import this project.
"""

from __future__ import annotations

import asyncio
import socket

import uvicorn
from fastmcp import FastMCP
from fastmcp_tasks import TasksExtension

mcp = FastMCP("bench")
mcp.add_extension(TasksExtension())


@mcp.tool(task=True)
async def bench_echo(text: str = "") -> str:
    """Echoes `text` at once (benchmark fixture)."""
    return "echo " + text


async def main() -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1024)
    app = mcp.http_app(path="/mcp", stateless_http=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on"))
    print(f"http://127.0.0.1:{listener.getsockname()[1]}/", flush=True)
    await server.serve(sockets=[listener])


if __name__ == "__main__":
    asyncio.run(main())
