"""Observability shared by every component: Prometheus metrics (`metrics`) and their endpoint (`endpoint`).

`install()` sets up the metrics once per process, and `record_writes(store)` hooks them into the writes
of one task store; the components do both when they are composed, so the embedded server, the gateway
and the operator record the same series.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import prometheus_client

from mcp_tasks.observability import metrics
from mcp_tasks.tasks.interfaces import TaskStore


@functools.cache
def install() -> None:
    """Set up the Prometheus metrics of this process (once): drop the `_created` series prometheus-client
    adds to every counter and histogram (half the series, rarely read).
    """
    prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]  # untyped in prometheus-client


def record_writes(store: TaskStore) -> Callable[[], None]:
    """Record the task creations, transitions and timings of `store`'s writes (`metrics.record_write`,
    a write observer of that store); returns the function that stops it.
    """
    install()
    return store.observe(metrics.record_write)


__all__ = ["install", "metrics", "record_writes"]
