"""Observability shared by every component: Prometheus metrics (`metrics`) and their endpoint (`endpoint`).

`install(*roles)` exports the metric families of the process's roles (`metrics.families`) in the default
registry, and `record_writes(store)` hooks them into the writes of one task store; the components do
both when they are composed, so the embedded server, the gateway and the operator record the same
series, each only those of its role.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import prometheus_client
from prometheus_client.metrics import MetricWrapperBase

from mcp_tasks.observability import metrics
from mcp_tasks.tasks.interfaces import TaskStore

# The families already in prometheus-client's default registry (itself process-wide): registering one
# twice raises. Tests start several components in one process; a real process installs once.
_EXPORTED: set[MetricWrapperBase] = set()


def install(*roles: metrics.Role) -> None:
    """Export the metric families of `roles` at `/metrics`.

    Idempotent: a family already exported (by an earlier call in this process) is not added again. Also
    drops, once, the `_created` series prometheus-client adds to every counter and histogram (half the
    series, rarely read).
    """
    _drop_created_series()
    for family in metrics.families(*roles):
        if family not in _EXPORTED:
            prometheus_client.REGISTRY.register(family)
            _EXPORTED.add(family)


@functools.cache
def _drop_created_series() -> None:
    prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]  # untyped in prometheus-client


def record_writes(store: TaskStore) -> Callable[[], None]:
    """Record the task creations, transitions and timings of `store`'s writes (`metrics.record_write`,
    a write observer of that store); returns the function that stops it.
    """
    _drop_created_series()
    return store.observe(metrics.record_write)


__all__ = ["install", "metrics", "record_writes"]
