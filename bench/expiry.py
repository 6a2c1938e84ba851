"""Expiry against creation on the test control plane: `python -m bench.expiry` (in `make bench-kubernetes`).

What it measures, in one run, against etcd + kube-apiserver (`tests.controlplane.cluster.ControlPlane`,
no controllers): how fast `KubernetesTaskStore` creates McpTasks with 32 concurrent creates (the
sustained create rate a busy gateway asks of the API server), and how fast the operator's expiry
(`KubernetesTaskStore.delete_expired`, as `Reconciler.expire` calls it) deletes finished, expired
ones: with one DELETE in flight (how expiry worked before) and with `EXPIRY_CONCURRENCY` in flight.
Target (issue 9): expiry deletions per second ≥ the create rate. Results in `docs/performance.md`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from kubernetes_asyncio import config
from kubernetes_asyncio.client import ApiClient

from mcp_tasks.protocol.models import TaskStatus
from mcp_tasks.store.kubernetes import KubernetesTaskStore
from mcp_tasks.store.kubernetes import store as store_module
from mcp_tasks.tasks import transitions
from mcp_tasks.tasks.ids import mint_task_id
from mcp_tasks.tasks.interfaces import Writer, transact, utc_now
from mcp_tasks.tasks.owner import Owner
from mcp_tasks.tasks.record import TaskRecord

NAMESPACE = "bench-expiry"


def _record() -> TaskRecord:
    now = utc_now()
    return TaskRecord(
        task_id=mint_task_id(),
        owner=Owner("bench", "bench", "static"),
        tool="bench_wait",
        arguments={},
        status=TaskStatus.WORKING,
        created_at=now,
        last_updated_at=now,
        ttl_ms=1000,
        poll_interval_ms=1000,
    )


async def _bounded(count: int, concurrency: int, make: object) -> float:
    """Run `make()` `count` times with `concurrency` in flight; return the wall time in seconds."""
    gate = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with gate:
            await make()  # type: ignore[operator]

    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(count)))
    return time.perf_counter() - started


async def measure(kubeconfig: Path, tasks: int) -> list[tuple[str, float]]:
    """Rates in objects per second: create (32 in flight), then expiry with 1 and with the default in flight."""
    await config.load_kube_config(config_file=str(kubeconfig))
    async with ApiClient() as api:
        store = KubernetesTaskStore(api, NAMESPACE)
        await store.open()
        try:
            rows: list[tuple[str, float]] = []
            created: list[TaskRecord] = []

            async def create() -> None:
                created.append(await store.create(_record()))

            seconds = await _bounded(tasks * 2, 32, create)
            rows.append(("create McpTask, 32 in flight", tasks * 2 / seconds))
            finish = iter(created)

            async def cancel() -> None:
                record = next(finish)
                await transact(
                    store, record.task_id, lambda r: (transitions.cancel(r, utc_now()), None), Writer.EXECUTOR
                )

            await _bounded(len(created), 32, cancel)
            later = utc_now() + timedelta(seconds=5)
            default = store_module.EXPIRY_CONCURRENCY
            for in_flight in (1, default):
                store_module.EXPIRY_CONCURRENCY = in_flight  # type: ignore[misc]  # the knob being measured
                started = time.perf_counter()
                deleted = await store.delete_expired(later, tasks)
                seconds = time.perf_counter() - started
                if len(deleted) != tasks:
                    raise RuntimeError(f"expected {tasks} deletions, got {len(deleted)}")
                rows.append((f"expiry DELETE, {in_flight} in flight", tasks / seconds))
            store_module.EXPIRY_CONCURRENCY = default  # type: ignore[misc]
            return rows
        finally:
            await store.aclose()


def main() -> None:
    """Start a control plane, measure, print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=1000, help="expired tasks per expiry measurement")
    args = parser.parse_args()
    from tests.controlplane import cluster

    with tempfile.TemporaryDirectory(prefix="mcptasks-expiry-") as tmp:
        try:
            plane = cluster.ControlPlane(Path(tmp) / "plane", controllers=False)
        except cluster.ControlPlaneUnavailable as exc:
            print(f"bench.expiry: {exc}", file=sys.stderr)
            sys.exit(2)
        with plane:
            plane.kubectl("create", "namespace", NAMESPACE)
            rows = asyncio.run(measure(plane.kubeconfig, args.tasks))
    print("| measure | objects/s |\n|---|---|")
    for name, rate in rows:
        print(f"| {name} | {rate:,.0f} |")
    create_rate = rows[0][1]
    expiry_rate = rows[-1][1]
    verdict = "PASS" if expiry_rate >= create_rate else "MISS"
    print(f"\nexpiry {expiry_rate:,.0f}/s vs create {create_rate:,.0f}/s: {verdict} (target: expiry ≥ create)")


if __name__ == "__main__":
    main()
