"""`mcptasks serve --log-json --metrics-port`: a real server process, its log lines and its `/metrics`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp

from tests.conftest import McpHttp
from tests.e2e.test_durability import ServerProcess, free_port
from tests.metrics import scrape, value


async def test_every_log_line_about_a_task_names_it_and_metrics_are_served(tmp_path: Path) -> None:
    metrics_port = free_port()
    log_path = tmp_path / "server.log"
    flags = ("--log-json", "--log-level", "INFO", "--metrics-port", str(metrics_port))
    server = ServerProcess(tmp_path / "data", *flags, log_path=log_path)
    try:
        url = await server.start()
        async with aiohttp.ClientSession() as session:
            mcp = McpHttp(session, url)
            task_id = await mcp.start_task("sleeper", {"seconds": 0.3})
            await mcp.wait_status(task_id, "completed")
            samples = await scrape(session, f"http://127.0.0.1:{metrics_port}/metrics")
        assert value(samples, "mcptasks_tasks_created_total", tool="sleeper") == 1
        finished = {"tool": "sleeper", "status": "completed", "reason": "Completed"}
        assert value(samples, "mcptasks_tasks_finished_total", **finished) == 1
    finally:
        await server.stop()
    lines: list[dict[str, Any]] = []
    for line in log_path.read_text().splitlines():
        if line.startswith("{"):
            lines.append(json.loads(line))
    about = [entry for entry in lines if task_id in entry["msg"] or entry.get("taskId") == task_id]
    assert len(about) >= 2, lines  # created, started, ...
    assert all(entry.get("taskId") == task_id and entry.get("tool") == "sleeper" for entry in about), about
