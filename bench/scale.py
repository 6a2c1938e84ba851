"""The operator and gateway at scale on the test control plane: `python -m bench.scale` (in `make bench-kubernetes`).

What it measures, against etcd + kube-apiserver (`tests.controlplane.cluster.ControlPlane`, no
controller manager: Jobs are created but no pod ever runs, so unfinished tasks stay unfinished and idle):

1. **Jobs created per second.** `--unfinished` working McpTasks (default 1,000 then 10,000 in all) are
   created through `KubernetesTaskStore` while no operator runs; then `mcptasks operator` starts, and
   from the moment it reports itself active the Jobs still to create are timed until the last one
   exists (the API is polled every 0.2 s): Jobs/s = Jobs timed / that time.
2. **Idle operator CPU** with those tasks unfinished: the operator's user + system CPU time
   (`/proc/<pid>/stat`) over `--idle-seconds` (60) once every task has its Job, as a share of one core.
   The operator runs with a resync every 60 s (`MCPTASKS_OPERATOR_RESYNC_INTERVAL_S`, five times the
   default rate), so each window includes one full resync: a reconcile of every unfinished task.
3. **Memory per retained finished task**, operator and gateway: in a second namespace, finished McpTasks
   (created, then completed through the status subresource as the operator's worker API does, with
   a 1 kB result) are added up to each of `--finished` (1,000 / 10,000 / 50,000). At each size a fresh
   operator and a fresh gateway (`--runner none`) start, load the namespace, and their resident memory
   (`VmRSS`) is read once settled; the gateway is read again after a `tasks/get` of every task (its
   bounded cache of full objects filled). Per task = (RSS at N - RSS at 0) / N.
4. **What the cluster holds per retained finished task** (issue 23), at each size of step 3 before
   the operator and gateway start: kube-apiserver `VmRSS` once it moved less than 1% over 10 s; its Go
   heap in use right after a forced GC (`/debug/pprof/heap?gc=1`, then `go_memstats_heap_inuse_bytes`);
   then etcd compacted to its current revision and defragmented through its v3 JSON gateway (what the
   API server's own compaction, every 5 minutes, and an etcd operator's defrag would do; done now so
   the figure does not depend on when the last one ran) and `etcd_mvcc_db_total_size_in_use_in_bytes`
   read. Per task = (figure at N - figure at 0) / N, and the marginal cost between sizes.

Targets (issue 9): idle operator CPU at 10,000 unfinished tasks ≤ 5% of a core; ≤ 3 kB per retained
finished task in the operator; the gateway's figure is documented (`docs/performance.md`). Issue 23:
kube-apiserver RSS ≤ 30,000 B and etcd ≤ 3,072 B per retained finished task.

`--unfinished` with no sizes skips steps 1-2; `--finished 1000 10000 50000 100000` is the run behind the
capacity table of docs/performance.md (kube-apiserver alone needs several GB of RAM at the top).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Final

import aiohttp

from bench import run, wire
from bench.kubernetes import TOOL_MANIFEST, ApiServer, start_gateway
from bench.object_size import TARGET_APISERVER_BYTES, TARGET_ETCD_BYTES, etcd_compact, etcd_in_use

UNFINISHED_NS: Final = "bench-scale"
FINISHED_NS: Final = "bench-retained"
TARGET_IDLE_CPU: Final = 0.05
TARGET_OPERATOR_BYTES: Final = 3 * 1024
RESULT: Final = {"content": [{"type": "text", "text": "x" * 1000}], "isError": False}


def _record() -> Any:
    from mcp_tasks.protocol.models import TaskStatus
    from mcp_tasks.tasks.ids import mint_task_id
    from mcp_tasks.tasks.interfaces import utc_now
    from mcp_tasks.tasks.owner import LOCAL_OWNER
    from mcp_tasks.tasks.record import TaskRecord

    now = utc_now()
    return TaskRecord(
        task_id=mint_task_id(),
        owner=LOCAL_OWNER,  # the gateway's principal without tokens (it serves loopback only)
        tool="bench_wait",
        arguments={"label": "scale", "seconds": 86400},
        status=TaskStatus.WORKING,
        created_at=now,
        last_updated_at=now,
        ttl_ms=604_800_000,
        poll_interval_ms=1000,
    )


async def create_tasks(kubeconfig: Path, namespace: str, count: int, finished: bool) -> list[str]:
    """Create `count` McpTasks (64 writes in flight), completed with `RESULT` when `finished`; their ids."""
    from kubernetes_asyncio import config
    from kubernetes_asyncio.client import ApiClient

    from mcp_tasks.store.kubernetes import KubernetesTaskStore
    from mcp_tasks.tasks import transitions
    from mcp_tasks.tasks.interfaces import Writer, utc_now

    await config.load_kube_config(config_file=str(kubeconfig))
    async with ApiClient() as api:
        store = KubernetesTaskStore(api, namespace)
        gate = asyncio.Semaphore(64)
        ids: list[str] = []

        async def one() -> None:
            async with gate:
                record = await store.create(_record())
                if finished:
                    await store.compare_and_swap(transitions.complete(record, dict(RESULT), utc_now()), Writer.EXECUTOR)
                ids.append(record.task_id)

        await asyncio.gather(*(one() for _ in range(count)))
        return ids


def count(api: ApiServer, path: str) -> int:
    """Objects in a collection, from one `limit=1` LIST (`remainingItemCount`)."""
    listing = api.get_json(f"{path}?limit=1")
    return len(listing["items"]) + int(listing["metadata"].get("remainingItemCount") or 0)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of `pid` (all its threads), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_bytes(pid: int) -> int:
    """Resident memory of `pid`, in bytes (`VmRSS`)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def start_operator(kubeconfig: Path, namespace: str, tmp: Path, name: str) -> subprocess.Popen[bytes]:
    """`mcptasks operator` on `namespace`; returns once this replica is the active one."""
    from tests.controlplane.cluster import free_port

    log = tmp / f"{name}.log"
    port = free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith("MCPTASKS_")}
    env["MCPTASKS_OPERATOR_RESYNC_INTERVAL_S"] = "60"
    argv = [
        *(run.PYTHON, "-m", "mcp_tasks.cli", "operator", "--kubeconfig", str(kubeconfig)),
        *("--namespace", namespace, "--worker-port", str(port), "--data-dir", str(tmp / name)),
        *("--worker-url", f"http://127.0.0.1:{port}"),
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(argv, cwd=run.REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while b"(reconciling)" not in log.read_bytes():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"operator did not become active:\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.1)
    return process


def settled_rss(pid: int, seconds: float = 3.0) -> int:
    """RSS once it stopped growing for `seconds` (the initial LIST decoded, caches filled)."""
    last, stable_since = rss_bytes(pid), time.monotonic()
    deadline = time.monotonic() + 120
    while time.monotonic() - stable_since < seconds and time.monotonic() < deadline:
        time.sleep(0.5)
        now = rss_bytes(pid)
        if abs(now - last) > 256 * 1024:
            last, stable_since = now, time.monotonic()
    return rss_bytes(pid)


def settled_apiserver_rss(pid: int, window_s: float = 10.0, timeout_s: float = 180.0) -> int:
    """kube-apiserver RSS in bytes once it moved less than 1% over `window_s` (at most `timeout_s` of waiting).

    Relative, not `settled_rss`'s 256 KiB: a Go heap of gigabytes breathes by more than that.
    """
    samples = [(time.monotonic(), rss_bytes(pid))]
    deadline = samples[0][0] + timeout_s
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = (time.monotonic(), rss_bytes(pid))
        samples = [sample for sample in samples if now[0] - sample[0] <= window_s] + [now]
        values = [value for _, value in samples]
        if now[0] - samples[0][0] >= window_s - 1.5 and max(values) - min(values) <= now[1] / 100:
            break
    return rss_bytes(pid)


def apiserver_heap_bytes(api: ApiServer) -> int:
    """kube-apiserver's Go heap in use right after a forced garbage collection, in bytes.

    `GET /debug/pprof/heap?gc=1` (profiling is on by default) runs `runtime.GC()` first; then
    `go_memstats_heap_inuse_bytes` from its `/metrics`. The live data without the garbage RSS still holds.
    """
    headers = {"Authorization": f"Bearer {api.token}", "Accept": "*/*"}
    context = api.ssl_context()
    with urllib.request.urlopen(
        urllib.request.Request(f"{api.server}/debug/pprof/heap?gc=1", headers=headers), context=context, timeout=300
    ) as answer:
        answer.read()
    with urllib.request.urlopen(
        urllib.request.Request(f"{api.server}/metrics", headers=headers), context=context, timeout=60
    ) as answer:
        for line in answer.read().decode().splitlines():
            if line.startswith("go_memstats_heap_inuse_bytes "):
                return int(float(line.split()[1]))
    raise RuntimeError("kube-apiserver reported no go_memstats_heap_inuse_bytes")


def cluster_memory(plane: Any, api: ApiServer) -> dict[str, int]:
    """What the cluster holds now, in bytes: kube-apiserver RSS and Go heap, etcd in use after compaction.

    In this order: RSS once settled (`settled_apiserver_rss`), the heap after a forced GC
    (`apiserver_heap_bytes`), then etcd compacted to its current revision and defragmented
    (`object_size.etcd_compact`) and `etcd_mvcc_db_total_size_in_use_in_bytes` read
    (`object_size.etcd_in_use`).
    """
    rss = settled_apiserver_rss(plane.processes["kube-apiserver"].pid)
    heap = apiserver_heap_bytes(api)
    etcd_compact(plane.etcd_url)
    return {"apiserver_rss": rss, "apiserver_heap": heap, "etcd_in_use": etcd_in_use(plane)}


async def read_all(url: str, ids: list[str]) -> None:
    """`tasks/get` every id once through the gateway (8 in flight), each answer checked."""
    gate = asyncio.Semaphore(8)
    async with aiohttp.ClientSession() as session:

        async def one(number: int, task_id: str) -> None:
            async with gate:
                body, headers = wire.get_body(number, task_id), wire.get_headers(task_id)
                async with session.post(url, data=body, headers=headers) as response:
                    if not wire.check_get(response.status, await response.read(), number, task_id):
                        raise RuntimeError(f"tasks/get {task_id} failed")

        await asyncio.gather(*(one(number, task_id) for number, task_id in enumerate(ids, 1)))


def unfinished_phase(plane: Any, api: ApiServer, sizes: list[int], idle_s: float, tmp: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    plane.kubectl("create", "namespace", UNFINISHED_NS)
    plane.kubectl("apply", "-n", UNFINISHED_NS, "-f", str(TOOL_MANIFEST))
    jobs_path = f"/apis/batch/v1/namespaces/{UNFINISHED_NS}/jobs"
    have = 0
    for size in sizes:
        print(f"  creating {size - have:,} working McpTasks (no operator running)…", flush=True)
        asyncio.run(create_tasks(plane.kubeconfig, UNFINISHED_NS, size - have, finished=False))
        have = size
        started = time.monotonic()
        operator = start_operator(plane.kubeconfig, UNFINISHED_NS, tmp, f"operator-unfinished-{size}")
        try:
            before = count(api, jobs_path)
            while (jobs := count(api, jobs_path)) < size:
                if time.monotonic() - started > 900:
                    raise RuntimeError(f"only {jobs} of {size} Jobs after 900 s")
                time.sleep(0.2)
            created_s = time.monotonic() - started
            time.sleep(5)  # the last writes (attempt counts) land
            cpu0, wall0 = cpu_seconds(operator.pid), time.monotonic()
            time.sleep(idle_s)
            idle = (cpu_seconds(operator.pid) - cpu0) / (time.monotonic() - wall0)
            rows.append(
                {
                    "unfinished": size,
                    "jobs_created": size - before,
                    "jobs_per_s": (size - before) / created_s,
                    "idle_cpu": idle,
                }
            )
            print(
                f"  {size:,} unfinished: {size - before:,} Jobs in {created_s:.1f} s; idle CPU {idle:.2%}", flush=True
            )
        finally:
            run.stop_process(operator)
    return rows


def finished_phase(plane: Any, api: ApiServer, sizes: list[int], tmp: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    plane.kubectl("create", "namespace", FINISHED_NS)
    plane.kubectl("apply", "-n", FINISHED_NS, "-f", str(TOOL_MANIFEST))
    ids: list[str] = []
    for size in [0, *sizes]:
        create_s = 0.0
        if size > len(ids):
            print(f"  creating {size - len(ids):,} finished McpTasks…", flush=True)
            started = time.monotonic()
            ids += asyncio.run(create_tasks(plane.kubeconfig, FINISHED_NS, size - len(ids), finished=True))
            create_s = time.monotonic() - started
        cluster = cluster_memory(plane, api)
        print(
            f"  {size:,} retained: kube-apiserver RSS {cluster['apiserver_rss'] / 2**20:.1f} MiB "
            f"(Go heap after GC {cluster['apiserver_heap'] / 2**20:.1f} MiB), etcd in use after compaction "
            f"{cluster['etcd_in_use'] / 2**20:.1f} MiB; created in {create_s:.0f} s",
            flush=True,
        )
        operator = start_operator(plane.kubeconfig, FINISHED_NS, tmp, f"operator-finished-{size}")
        try:
            # the gateway listens only once it has listed every task (over 30 s at 100,000 on this machine)
            gateway = start_gateway(
                plane, None, tmp, FINISHED_NS, f"gateway-finished-{size}", timeout_s=60 + size / 500
            )
        except BaseException:
            run.stop_process(operator)  # else it outlives the bench, idle, after its control plane stops
            raise
        try:
            if ids:
                asyncio.run(read_all(gateway.url, ids[-1:]))  # the gateway answers: it has listed
            row = {
                "retained": size,
                "create_s": create_s,
                **cluster,
                "operator_rss": settled_rss(operator.pid),
                "gateway_rss": settled_rss(gateway.process.pid),
            }
            asyncio.run(read_all(gateway.url, ids))
            row["gateway_rss_read"] = settled_rss(gateway.process.pid)
            rows.append(row)
            print(
                f"  {size:,} retained: operator {row['operator_rss'] / 2**20:.1f} MiB, gateway "
                f"{row['gateway_rss'] / 2**20:.1f} MiB ({row['gateway_rss_read'] / 2**20:.1f} MiB after reading all)",
                flush=True,
            )
        finally:
            run.stop_process(operator)
            run.stop_server(gateway)
    return rows


def cluster_report(finished: list[dict[str, Any]]) -> list[str]:
    """The cluster's cost per retained finished task as Markdown lines: the table, then the verdicts.

    Per task = (figure at N - figure at 0) / N; marginal = (figure at N - figure at the size before) /
    (N - that size), the slope a capacity plan multiplies by. Bytes, not kB, so no unit is ambiguous.
    """
    base = finished[0]
    lines = [
        "| retained finished tasks | kube-apiserver RSS | per task | marginal | Go heap after GC | per task "
        "| etcd in use (compacted) | per task | marginal |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    previous = base
    for row in finished:
        n = row["retained"]

        def per(key: str, since: dict[str, Any], row: dict[str, Any] = row, n: int = n) -> str:
            tasks = n - since["retained"]
            return "-" if tasks <= 0 else f"{(row[key] - since[key]) / tasks:,.0f} B"

        lines.append(
            f"| {n:,} | {row['apiserver_rss'] / 2**20:,.1f} MiB | {per('apiserver_rss', base)} "
            f"| {per('apiserver_rss', previous)} | {row['apiserver_heap'] / 2**20:,.1f} MiB "
            f"| {per('apiserver_heap', base)} | {row['etcd_in_use'] / 2**20:,.1f} MiB | {per('etcd_in_use', base)} "
            f"| {per('etcd_in_use', previous)} |"
        )
        previous = row
    top = finished[-1]
    if top["retained"]:
        for key, name, target in (
            ("apiserver_rss", "kube-apiserver RSS", TARGET_APISERVER_BYTES),
            ("etcd_in_use", "etcd in use", TARGET_ETCD_BYTES),
        ):
            per_task = (top[key] - base[key]) / top["retained"]
            verdict = "PASS" if per_task <= target else "MISS"
            lines.append(
                f"\n{name} {per_task:,.0f} B per retained finished task at {top['retained']:,}: "
                f"{verdict} (target ≤ {target:,} B)"
            )
    return lines


def report(unfinished: list[dict[str, Any]], finished: list[dict[str, Any]]) -> str:
    """Both phases' figures as Markdown tables and verdict lines (the unfinished table only if it ran)."""
    lines = [
        "| unfinished idle tasks | Jobs timed | Jobs/s | idle operator CPU (share of a core) | target |",
        "|---|---|---|---|---|",
    ]
    if not unfinished:
        lines = []
    for row in unfinished:
        verdict = "PASS" if row["idle_cpu"] <= TARGET_IDLE_CPU else "MISS"
        lines.append(
            f"| {row['unfinished']:,} | {row['jobs_created']:,} | {row['jobs_per_s']:,.0f} | {row['idle_cpu']:.2%} | "
            f"≤ {TARGET_IDLE_CPU:.0%}: {verdict} |"
        )
    base = finished[0]
    lines += ["", *cluster_report(finished)]
    lines += [
        "",
        "| retained finished tasks | operator RSS | per task | gateway RSS | per task "
        "| gateway RSS after reading all | per task |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in finished:
        n = row["retained"]

        def per(key: str, row: dict[str, Any] = row, n: int = n) -> str:
            return "-" if n == 0 else f"{(row[key] - base[key]) / n / 1024:.2f} kB"

        lines.append(
            f"| {n:,} | {row['operator_rss'] / 2**20:.1f} MiB | {per('operator_rss')} "
            f"| {row['gateway_rss'] / 2**20:.1f} MiB | {per('gateway_rss')} "
            f"| {row['gateway_rss_read'] / 2**20:.1f} MiB | {per('gateway_rss_read')} |"
        )
    top = finished[-1]
    if top["retained"]:
        per_task = (top["operator_rss"] - base["operator_rss"]) / top["retained"]
        verdict = "PASS" if per_task <= TARGET_OPERATOR_BYTES else "MISS"
        lines.append(
            f"\noperator {per_task / 1024:.2f} kB per retained finished task at {top['retained']:,}: "
            f"{verdict} (target ≤ 3 kB)"
        )
    return "\n".join(lines)


def main() -> None:
    """Start a control plane, run both phases, print Markdown tables (and `--json`)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--unfinished", type=int, nargs="*", default=[1000, 10_000], help="unfinished task counts (none: skip)"
    )
    parser.add_argument(
        "--finished",
        type=int,
        nargs="+",
        default=[1000, 10_000, 50_000],
        help="retained task counts (the capacity table adds 100000)",
    )
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    parser.add_argument("--json", type=Path, help="also write the raw figures here")
    args = parser.parse_args()
    from tests.controlplane import cluster

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mcptasks-scale-") as name:
        tmp = Path(name)
        try:
            plane = cluster.ControlPlane(tmp / "plane", controllers=False)
        except cluster.ControlPlaneUnavailable as exc:
            print(f"bench.scale: {exc}", file=sys.stderr)
            sys.exit(2)
        with plane:
            api = ApiServer.from_kubeconfig(plane.kubeconfig)
            print("unfinished, idle tasks:", flush=True)
            unfinished = unfinished_phase(plane, api, sorted(args.unfinished), args.idle_seconds, tmp)
            print("retained finished tasks:", flush=True)
            finished = finished_phase(plane, api, sorted(args.finished), tmp)
    if args.json:
        args.json.write_text(json.dumps({"unfinished": unfinished, "finished": finished}, indent=2))
    print(report(unfinished, finished))
    print(f"\nbench.scale took {(time.monotonic() - started) / 60:.1f} min")


if __name__ == "__main__":
    main()
