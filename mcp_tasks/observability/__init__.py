"""Observability shared by every component: Prometheus metrics (`metrics`) and their endpoint (`endpoint`).

`install()` hooks the metrics into the task write path once per process; the components call it when
they start, so the embedded server, the gateway and the operator record the same series.
"""

from __future__ import annotations

import functools

import prometheus_client

from mcp_tasks.observability import metrics
from mcp_tasks.tasks.interfaces import add_write_observer


@functools.cache
def install() -> None:
    """Record task creations, transitions and timings in the Prometheus metrics (once per process).

    Also drops the `_created` series prometheus-client adds to every counter and histogram (half the
    series, rarely read).
    """
    prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]  # untyped in prometheus-client
    add_write_observer(metrics.record_write)


__all__ = ["install", "metrics"]
