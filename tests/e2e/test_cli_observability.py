"""`mcptasks serve --log-json --metrics-port`: a real server process, its log lines and its `/metrics`."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import aiohttp

from tests.conftest import REPO, TOOL_DIRS, McpHttp
from tests.e2e.test_durability import free_port
from tests.metrics import scrape, value


async def test_every_log_line_about_a_task_names_it_and_metrics_are_served(tmp_path: Path) -> None:
    port, metrics_port = free_port(), free_port()
    args = [sys.executable, "-m", "mcp_tasks.cli", "serve", "--port", str(port), "--data-dir", str(tmp_path)]
    for folder in TOOL_DIRS:
        args += ["--tools", str(folder)]
    args += ["--log-json", "--log-level", "INFO", "--metrics-port", str(metrics_port)]
    log_path = tmp_path / "server.log"
    with log_path.open("wb") as log:
        process = await asyncio.create_subprocess_exec(*args, cwd=REPO, env=dict(os.environ), stderr=log, stdout=log)
    try:
        async with aiohttp.ClientSession() as session:
            async with asyncio.timeout(15):
                while True:
                    try:
                        async with session.get(f"http://127.0.0.1:{port}/healthz") as response:
                            if response.status == 200:
                                break
                    except aiohttp.ClientError:
                        pass
                    await asyncio.sleep(0.05)
            mcp = McpHttp(session, f"http://127.0.0.1:{port}/mcp")
            task_id = await mcp.start_task("sleeper", {"seconds": 0.3})
            await mcp.wait_status(task_id, "completed")
            samples = await scrape(session, f"http://127.0.0.1:{metrics_port}/metrics")
        assert value(samples, "mcptasks_tasks_created_total", tool="sleeper") == 1
        assert (
            value(samples, "mcptasks_tasks_finished_total", tool="sleeper", status="completed", reason="Completed") == 1
        )
    finally:
        process.terminate()
        await process.wait()
    lines: list[dict[str, Any]] = []
    for line in log_path.read_text().splitlines():
        if line.startswith("{"):
            lines.append(json.loads(line))
    about = [entry for entry in lines if task_id in entry["msg"] or entry.get("taskId") == task_id]
    assert len(about) >= 2, lines  # created, started, ...
    assert all(entry.get("taskId") == task_id and entry.get("tool") == "sleeper" for entry in about), about
