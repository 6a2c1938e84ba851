"""Optional OpenTelemetry traces: one trace per task, from `tools/call` to its result (the `otel` extra).

Off unless the extra is installed (`pip install 'mcp-tasks[otel]'`) and the standard variables ask
for it: `OTEL_TRACES_EXPORTER` (`otlp`, `console`; `none` switches it off) or an
`OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`; `OTEL_SERVICE_NAME` and the
other `OTEL_*` variables work as the SDK documents them. Off, `span` yields `None` and nothing from
`opentelemetry` is ever imported.

Spans (names follow `mcp.<what>`): `mcp.task.create` (a SERVER span; its parent is the W3C
`traceparent` the client sent in `params._meta`, if any) around the store write that creates the task;
its `traceparent` is kept in the task record, so the executor (another process, perhaps another
machine) continues the same trace: `mcp.task.run` around a local run or `mcp.task.job` around the Job
creation, and `mcp.worker <route>` for each worker-API call of the tool. The tool process gets the run's
`traceparent` in its environment (`TRACEPARENT`), so a tool's own spans join the trace.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Iterator
from typing import Any, Final

logger = logging.getLogger("mcp_tasks.observability")

ENV_TRACEPARENT: Final = "TRACEPARENT"
"""The tool process's environment variable with its run's W3C `traceparent`."""

META_TRACEPARENT: Final = "traceparent"
"""The `params._meta` key a client may send its W3C `traceparent` in."""

_TRACEPARENT: Final = re.compile(r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")


class _State:
    tracer: Any = None


_state = _State()


def configure(provider: Any = None, service_name: str = "mcp-tasks") -> bool:
    """Turn tracing on with `provider` (an SDK `TracerProvider`), or as the `OTEL_*` variables ask.

    Returns whether tracing is on. Without `provider`, the `OTEL_*` variables decide; when they ask for
    traces but the extra is missing, a warning says what to install and tracing stays off.
    """
    if provider is None:
        provider = _provider_from_environment(service_name)
        if provider is None:
            return False
    _state.tracer = provider.get_tracer("mcp_tasks")
    return True


def reset() -> None:
    """Turn tracing off again (tests)."""
    _state.tracer = None


def _provider_from_environment(service_name: str) -> Any:
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    exporter_name = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if exporter_name == "none" or not (exporter_name or endpoint):
        return None
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

        exporter: SpanExporter
        if exporter_name == "console":
            exporter = ConsoleSpanExporter()
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter()
    except ImportError:
        logger.warning("OTEL_* asks for traces, but the otel extra is missing: pip install 'mcp-tasks[otel]'")
        return None
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or service_name})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def valid_traceparent(value: object) -> str | None:
    """`value` when it is a W3C `traceparent` (version 00 form), else `None` (ignored, never an error)."""
    return value if isinstance(value, str) and _TRACEPARENT.match(value) and value[:2] != "ff" else None


@contextlib.contextmanager
def span(
    name: str, parent: str | None = None, attributes: dict[str, Any] | None = None, *, server: bool = False
) -> Iterator[str | None]:
    """A span `name`, child of the current span or of the W3C `parent`; yields its own `traceparent`.

    Yields `None` when tracing is off (then nothing is imported or recorded). `attributes` with a
    `None` value are left out; `server` marks the span that answers a client (SpanKind.SERVER).
    """
    tracer = _state.tracer
    if tracer is None:
        yield None
        return
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    propagator = TraceContextTextMapPropagator()
    context = propagator.extract({"traceparent": parent}) if parent else None
    kind = trace.SpanKind.SERVER if server else trace.SpanKind.INTERNAL
    kept = {key: value for key, value in (attributes or {}).items() if value is not None}
    with tracer.start_as_current_span(name, context=context, kind=kind, attributes=kept):
        carrier: dict[str, str] = {}
        propagator.inject(carrier)
        yield carrier.get("traceparent")


def record_span(name: str, parent: str, start_ns: int, attributes: dict[str, Any] | None = None) -> None:
    """Record a finished span `name` under the W3C `parent`, from `start_ns` (`time.time_ns()`) to now."""
    tracer = _state.tracer
    if tracer is None:
        return
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    context = TraceContextTextMapPropagator().extract({"traceparent": parent})
    kept = {key: value for key, value in (attributes or {}).items() if value is not None}
    tracer.start_span(name, context=context, start_time=start_ns, attributes=kept).end()
