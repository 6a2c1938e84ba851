"""Prometheus metrics of the embedded server, scraped over HTTP while real tasks run."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import aiohttp
import pytest

from mcp_tasks.observability.endpoint import start_metrics_server
from mcp_tasks.protocol.models import TaskStatus
from mcp_tasks.tasks.record import TaskRecord
from tests.conftest import PLAIN_CAPS, Embedded, McpHttp, until
from tests.metrics import Samples, scrape, value


@pytest.fixture
async def metrics_url() -> AsyncIterator[str]:
    runner, port = await start_metrics_server("127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{port}/metrics"
    finally:
        await runner.cleanup()


def delta(after: Samples, before: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


async def swept(session: aiohttp.ClientSession, url: str, holds: Callable[[Samples], bool]) -> Samples | None:
    """The samples at `url` when `holds(samples)`: the sweep sets its gauges on its own period, told to no one."""
    samples = await scrape(session, url)
    return samples if holds(samples) else None


async def test_metrics_move_as_real_tasks_run(
    embedded: Embedded, mcp: McpHttp, http_session: aiohttp.ClientSession, metrics_url: str
) -> None:
    before = await scrape(http_session, metrics_url)
    task_id = await mcp.start_task("sleeper", {"seconds": 1.0})
    during = await until(  # the runner's sweep (every 0.2 s here) sets the gauge of unfinished tasks
        lambda: swept(http_session, metrics_url, lambda s: value(s, "mcptasks_tasks", status="working") >= 1)
    )
    assert value(during, "mcptasks_unfinished_task_max_age_seconds") > 0
    assert value(during, "mcptasks_sweep_timestamp_seconds") > 1.7e9
    await mcp.wait_status(task_id, "completed")
    assert (await mcp.call_tool("greet", {"name": "m"}, caps=PLAIN_CAPS)).status == 200
    assert (await mcp.call_tool("no_such_tool", {})).error["code"] == -32602
    assert (await mcp.post("{", {"Content-Type": "application/json"})).status == 400
    after = await scrape(http_session, metrics_url)

    assert delta(after, before, "mcptasks_tasks_created_total", tool="sleeper") == 1
    assert delta(after, before, "mcptasks_runs_started_total", tool="sleeper") == 1
    assert delta(after, before, "mcptasks_runs_started_total", tool="greet") == 1, "a synchronous run is a run"
    assert delta(after, before, "mcptasks_tasks_created_total", tool="greet") == 0, "and no task"
    assert (
        delta(after, before, "mcptasks_tasks_finished_total", tool="sleeper", status="completed", reason="Completed")
        == 1
    )
    assert delta(after, before, "mcptasks_task_transitions_total", tool="sleeper", status="completed") == 1
    assert delta(after, before, "mcptasks_task_queue_seconds_count", tool="sleeper") == 1
    assert delta(after, before, "mcptasks_task_duration_seconds_count", tool="sleeper") == 1
    assert delta(after, before, "mcptasks_task_duration_seconds_sum", tool="sleeper") >= 1.0
    assert delta(after, before, "mcptasks_requests_total", method="tools/call", code="ok") == 2
    assert delta(after, before, "mcptasks_requests_total", method="tools/call", code="-32602") == 1
    assert delta(after, before, "mcptasks_requests_total", method="none", code="-32700") == 1
    assert delta(after, before, "mcptasks_requests_total", method="tasks/get", code="ok") >= 1
    assert delta(after, before, "mcptasks_request_duration_seconds_count", method="tools/call") == 3
    # the sleeper posts its result to the worker API; greet, warm-served, answers in its call's stream
    assert delta(after, before, "mcptasks_worker_api_requests_total", route="/result", code="204") == 1
    assert delta(after, before, "mcptasks_warm_calls_total", tool="greet", outcome="result") == 1
    assert (
        delta(after, before, "mcptasks_store_operation_duration_seconds_count", store="sqlite", operation="write") > 0
    )
    # a later sweep (every 0.2 s here) sees the task finished
    await until(lambda: swept(http_session, metrics_url, lambda s: value(s, "mcptasks_tasks", status="working") == 0))
    assert not [key for key in after if any(label == "taskId" or task_id in v for label, v in key[1])], (
        "no task id in any label"
    )


async def test_input_waits_and_open_streams_are_measured(
    embedded: Embedded, mcp: McpHttp, http_session: aiohttp.ClientSession, metrics_url: str
) -> None:
    waits: list[float] = []  # each wait, from the records of the writes that ended it

    def observe(before: TaskRecord | None, after: TaskRecord) -> None:
        if before is not None and before.status is TaskStatus.INPUT_REQUIRED and after.status != before.status:
            waits.append((after.last_updated_at - before.last_updated_at).total_seconds())

    before = await scrape(http_session, metrics_url)
    remove = embedded.store.observe(observe)
    try:
        task_id = await mcp.start_task("hello_world")
        await mcp.wait_status(task_id, "input_required")
        await mcp.update(task_id, {"name": {"action": "accept", "content": {"name": "Ada"}}})
        await mcp.wait_status(task_id, "completed")
    finally:
        remove()
    after = await scrape(http_session, metrics_url)
    assert delta(after, before, "mcptasks_task_input_wait_seconds_count", tool="hello_world") == 1
    (waited,) = waits
    assert waited > 0
    assert delta(after, before, "mcptasks_task_input_wait_seconds_sum", tool="hello_world") == pytest.approx(waited), (
        "the time from entering input_required to leaving it, as the task's record has it"
    )
    assert delta(after, before, "mcptasks_task_transitions_total", tool="hello_world", status="input_required") == 1
