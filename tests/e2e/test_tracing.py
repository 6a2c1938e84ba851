"""Optional OpenTelemetry traces (the `otel` extra, installed in the test environment): one trace per
task, continuing the client's `traceparent`, reaching the tool process in its environment."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from mcp_tasks.observability import tracing
from tests.conftest import McpHttp, until

CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_PARENT = f"00-{CLIENT_TRACE}-b7ad6b7169203331-01"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    assert tracing.configure(provider)
    try:
        yield exporter
    finally:
        tracing.reset()
        provider.shutdown()


async def test_one_trace_from_the_call_through_the_run_to_the_tool(mcp: McpHttp, spans: InMemorySpanExporter) -> None:
    params_meta = {**mcp.envelope({"extensions": {"io.modelcontextprotocol/tasks": {}}}), "traceparent": CLIENT_PARENT}
    reply = await mcp.request("tools/call", {"name": "traced", "arguments": {}, "_meta": params_meta}, with_meta=False)
    task_id = reply.result["taskId"]
    done = await mcp.wait_status(task_id, "completed")
    tool_saw = done["result"]["content"][0]["text"]

    def run_ended() -> dict[str, ReadableSpan] | None:  # once its process has exited, just after the result
        finished = {span.name: span for span in spans.get_finished_spans()}
        return finished if "mcp.task.run" in finished else None

    finished = await until(run_ended, timeout_s=5)
    assert {"mcp.task.create", "mcp.task.run", "mcp.worker /input", "mcp.worker /status", "mcp.worker /result"} <= set(
        finished
    ), sorted(finished)
    assert {format(span.context.trace_id, "032x") for span in finished.values()} == {CLIENT_TRACE}, "one trace"
    create, run = finished["mcp.task.create"], finished["mcp.task.run"]
    assert create.parent is not None and format(create.parent.span_id, "016x") == "b7ad6b7169203331"
    assert run.parent is not None and run.parent.span_id == create.context.span_id
    assert run.attributes is not None and run.attributes["mcp.task.id"] == task_id
    assert tool_saw == f"00-{CLIENT_TRACE}-{format(run.context.span_id, '016x')}-01", "the tool got its run's context"
    result = finished["mcp.worker /result"]
    assert result.parent is not None and result.parent.span_id == run.context.span_id


async def test_without_tracing_nothing_is_traced_and_the_tool_gets_no_context(mcp: McpHttp) -> None:
    task_id = await mcp.start_task("traced")
    done = await mcp.wait_status(task_id, "completed")
    assert done["result"]["content"][0]["text"] == ""
