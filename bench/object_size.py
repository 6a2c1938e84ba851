"""What one McpTask costs in etcd, field by field: `python -m bench.object_size` (in `make bench-kubernetes`).

Method: start the test control plane (`tests.controlplane.cluster.ControlPlane`: etcd + kube-apiserver,
no controller manager), create one task through `KubernetesTaskStore` as the gateway does, then make the
writes a real run with one input round makes, each through the store's compare-and-swap as its writer
makes it (executor writes on the status subresource, client writes on `spec`):

1. the executor claims the task (a lease, attempt 1),
2. reports progress (`statusMessage` + `progress`),
3. asks for input (one `elicitation/create` request with its `roundId`: `input_required`),
4. the client answers it (`tasks/update`, a `spec` write),
5. the executor consumes the answer (back to `working`),
6. renews its lease,
7. completes the task with a ~1 kB text result.

The finished object is then read twice: from the API server (GET, JSON) and from etcd itself, through
etcd's v3 JSON gateway (`POST /v3/kv/range` on the client URL: the control plane has no `etcdctl`). The
API server stores custom resources as JSON (no protobuf for CRs), so the etcd value is the object's
compact JSON as stored, `managedFields` included. Printed: the etcd value's size, then the size of each
part of the GET answer as compact JSON (`metadata` and its `managedFields` entry by entry, `spec` and
`status` field by field, each condition), and how many `managedFields` entries the object has.

Then, with `--tasks N` (default 2,000; 0 skips it), N more finished tasks (each created and completed
with the 1 kB result, as `bench.scale` makes them) are added to a second namespace, and what they cost
the cluster is read: kube-apiserver resident memory (`VmRSS`, read once it stopped growing) and etcd's
database in use (`etcd_mvcc_db_total_size_in_use_in_bytes` from its `/metrics`) before and after;
per task = difference / N. N this small weighs fixed costs (caches warming) into the figure, so it is
an upper bound; `bench.scale` measures at 10,000 and more.

`--json` prints the same figures as one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import sys
import tempfile
import urllib.request
from datetime import timedelta
from pathlib import Path
from typing import Any, Final

NAMESPACE: Final = "bench-size"
RESULT: Final = {"content": [{"type": "text", "text": "x" * 1000}], "isError": False}
ARGUMENTS: Final = {"label": "size", "seconds": 5}
ELICITATION: Final = {
    "method": "elicitation/create",
    "params": {
        "mode": "form",
        "message": "Approve?",
        "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}},
    },
}
ANSWER: Final = {"action": "accept", "content": {"ok": True}}
TARGET_ETCD_BYTES: Final = 3 * 1024
TARGET_APISERVER_BYTES: Final = 30_000


def size(value: Any) -> int:
    """Bytes of `value` as compact JSON (UTF-8), as the API server stores a custom resource."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def breakdown(obj: dict[str, Any]) -> dict[str, Any]:
    """The size of each part of an McpTask object, in bytes of compact JSON.

    Shape: `{"object", "metadata", "metadata.managedFields", "managedFields": [{manager, operation,
    subresource, bytes}], "spec", "spec.<field>"..., "status", "status.<field>"..., "conditions": [{type, bytes}]}`.
    """
    metadata = obj.get("metadata") or {}
    managed = metadata.get("managedFields") or []
    figures: dict[str, Any] = {
        "object": size(obj),
        "metadata": size(metadata),
        "metadata.managedFields": size(managed) if managed else 0,
        "managedFields": [
            {
                "manager": entry.get("manager"),
                "operation": entry.get("operation"),
                "subresource": entry.get("subresource", ""),
                "bytes": size(entry),
            }
            for entry in managed
        ],
    }
    for part in ("spec", "status"):
        body = obj.get(part) or {}
        figures[part] = size(body)
        for key, value in body.items():
            figures[f"{part}.{key}"] = size(value)
    figures["conditions"] = [
        {"type": condition.get("type"), "bytes": size(condition)}
        for condition in (obj.get("status") or {}).get("conditions") or []
    ]
    return figures


def etcd_value(etcd_url: str, key: str) -> bytes:
    """The value etcd holds under `key`, through its v3 JSON gateway (`/v3/kv/range`).

    Raises:
        KeyError: etcd holds nothing under `key`.
    """
    body = json.dumps({"key": base64.b64encode(key.encode()).decode()}).encode()
    request = urllib.request.Request(f"{etcd_url}/v3/kv/range", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        found = json.load(answer)
    kvs = found.get("kvs") or []
    if not kvs:
        raise KeyError(key)
    return base64.b64decode(kvs[0].get("value", ""))


async def run_one_task(kubeconfig: Path, namespace: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
    """Create one task and take it through a run with one input round to `completed`; the finished object (GET).

    Every write goes through `KubernetesTaskStore.compare_and_swap` as its writer makes it.
    """
    from kubernetes_asyncio import config

    from mcp_tasks.protocol.models import TaskStatus
    from mcp_tasks.store.kubernetes import KubernetesTaskStore
    from mcp_tasks.store.kubernetes.client import Apis, call
    from mcp_tasks.store.kubernetes.resources import GROUP, TASK_PLURAL, VERSION
    from mcp_tasks.tasks import transitions
    from mcp_tasks.tasks.ids import mint_task_id
    from mcp_tasks.tasks.interfaces import Writer, utc_now
    from mcp_tasks.tasks.owner import LOCAL_OWNER
    from mcp_tasks.tasks.record import TaskRecord

    await config.load_kube_config(config_file=str(kubeconfig))
    from kubernetes_asyncio.client import ApiClient

    async with ApiClient() as api:
        store = KubernetesTaskStore(api, namespace)
        now = utc_now()
        record = await store.create(
            TaskRecord(
                task_id=mint_task_id(),
                owner=LOCAL_OWNER,
                tool="bench_input",
                arguments=dict(ARGUMENTS if arguments is None else arguments),
                status=TaskStatus.WORKING,
                created_at=now,
                last_updated_at=now,
                ttl_ms=3_600_000,
                poll_interval_ms=1000,
                client_capabilities={"elicitation": {"form": {}}},
            )
        )
        lease, retention = timedelta(seconds=30), 3_600_000

        async def executor(change: TaskRecord) -> TaskRecord:
            return await store.compare_and_swap(change, Writer.EXECUTOR)

        record = await executor(transitions.claim(record, "operator-0", utc_now(), lease, retention))
        record = await executor(transitions.report_progress(record, 1, 3, None, utc_now()))
        round_id = "Zk3qv0b1T2xYc9Lw"  # as the tool runtime sends one (16 characters)
        record, keys = transitions.add_input_requests(record, [("approve", dict(ELICITATION))], utc_now(), round_id)
        record = await executor(record)
        record = await store.compare_and_swap(
            transitions.answer_input_requests(record, {keys[0]: dict(ANSWER)}, utc_now()), Writer.CLIENT
        )
        record, _taken = transitions.take_input_responses(record, keys)
        record = await executor(record)
        record = await executor(transitions.renew(record, "operator-0", utc_now(), lease, retention))
        record = await executor(transitions.complete(record, dict(RESULT), utc_now()))
        finished = await store.get(record.task_id, fresh=True)
        assert finished.status is TaskStatus.COMPLETED, finished.status
        objects = Apis(api).objects
        got: dict[str, Any] = await call(
            objects.get_namespaced_custom_object, GROUP, VERSION, namespace, TASK_PLURAL, record.task_id
        )
        return got


def apiserver_rss(plane: Any) -> int:
    """kube-apiserver resident memory once it stopped growing (two reads 2 s apart within 1%), in bytes."""
    import time

    from bench.scale import rss_bytes

    pid = plane.processes["kube-apiserver"].pid
    before = rss_bytes(pid)
    for _ in range(15):
        time.sleep(2)
        now = rss_bytes(pid)
        if abs(now - before) <= before / 100:
            return now
        before = now
    return before


def etcd_in_use(plane: Any) -> int:
    """etcd's database size in use (`etcd_mvcc_db_total_size_in_use_in_bytes`), in bytes."""
    with urllib.request.urlopen(f"{plane.etcd_url}/metrics", timeout=10) as answer:
        for line in answer.read().decode().splitlines():
            if line.startswith("etcd_mvcc_db_total_size_in_use_in_bytes "):
                return int(float(line.split()[1]))
    raise RuntimeError("etcd reported no etcd_mvcc_db_total_size_in_use_in_bytes")


def etcd_post(etcd_url: str, path: str, body: dict[str, Any], timeout_s: float = 300) -> dict[str, Any]:
    """POST `body` to etcd's v3 JSON gateway at `path` (e.g. `/v3/kv/range`); the decoded answer."""
    request = urllib.request.Request(
        f"{etcd_url}{path}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as answer:
        found: dict[str, Any] = json.load(answer)
    return found


def etcd_compact(etcd_url: str) -> int:
    """Compact etcd to its current revision (physical), then defragment it; the revision compacted to.

    What the API server does every 5 minutes (`--etcd-compaction-interval`), done now, plus the defrag
    an operator of etcd runs, so `etcd_in_use` counts each key's latest revision only, in compact pages.
    Through etcd's v3 JSON gateway (`/v3/kv/range` for the revision, `/v3/kv/compaction`,
    `/v3/maintenance/defragment`): the control plane has no `etcdctl`.
    """
    key = base64.b64encode(b"compact_rev_key").decode()
    revision = int(etcd_post(etcd_url, "/v3/kv/range", {"key": key, "count_only": True})["header"]["revision"])
    etcd_post(etcd_url, "/v3/kv/compaction", {"revision": revision, "physical": True})
    etcd_post(etcd_url, "/v3/maintenance/defragment", {})
    return revision


def measure_many(plane: Any, tasks: int) -> dict[str, Any]:
    """kube-apiserver RSS and etcd size per retained finished task, over `tasks` of them (module docstring)."""
    from bench.scale import create_tasks

    namespace = f"{NAMESPACE}-many"
    plane.kubectl("create", "namespace", namespace)
    rss_before, etcd_before = apiserver_rss(plane), etcd_in_use(plane)
    asyncio.run(create_tasks(plane.kubeconfig, namespace, tasks, finished=True))
    rss_after, etcd_after = apiserver_rss(plane), etcd_in_use(plane)
    return {
        "tasks": tasks,
        "apiserver_rss_per_task": (rss_after - rss_before) / tasks,
        "etcd_in_use_per_task": (etcd_after - etcd_before) / tasks,
    }


def measure(plane: Any) -> dict[str, Any]:
    """Run one task on `plane` (a started `ControlPlane`); measure its finished McpTask (module docstring)."""
    plane.kubectl("create", "namespace", NAMESPACE)
    obj = asyncio.run(run_one_task(plane.kubeconfig, NAMESPACE))
    name = obj["metadata"]["name"]
    stored = etcd_value(plane.etcd_url, f"/registry/mcptasks.io/mcptasks/{NAMESPACE}/{name}")
    return {"etcd": len(stored), "breakdown": breakdown(obj)}


def report(figures: dict[str, Any]) -> str:
    """The figures as text lines."""
    parts = figures["breakdown"]
    verdict = "met" if figures["etcd"] <= TARGET_ETCD_BYTES else "NOT met"
    many = figures.get("many")
    lines = []
    if many:
        lines.append(
            f"{many['tasks']} finished tasks: kube-apiserver RSS"
            f" {many['apiserver_rss_per_task'] / 1000:.1f} kB per task"
            f" (target <= {TARGET_APISERVER_BYTES // 1000} kB), etcd in use"
            f" {many['etcd_in_use_per_task'] / 1000:.2f} kB"
            " per task (database pages, revisions not yet compacted included)"
        )
    lines += [
        f"finished McpTask in etcd: {figures['etcd']} bytes (target <= {TARGET_ETCD_BYTES}: {verdict})",
        f"  GET as compact JSON: {parts['object']} bytes",
        f"  metadata: {parts['metadata']} (managedFields {parts['metadata.managedFields']}"
        f" in {len(parts['managedFields'])} entries)",
    ]
    for entry in parts["managedFields"]:
        lines.append(f"    {entry['manager']} {entry['operation']} {entry['subresource'] or 'main'}: {entry['bytes']}")
    for part in ("spec", "status"):
        lines.append(f"  {part}: {parts[part]}")
        for key, value in parts.items():
            if key.startswith(f"{part}.") and isinstance(value, int):
                lines.append(f"    {key.removeprefix(part + '.')}: {value}")
    for condition in parts["conditions"]:
        lines.append(f"    condition {condition['type']}: {condition['bytes']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Entry point: start a control plane, measure, print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    parser.add_argument("--tasks", type=int, default=2000, help="finished tasks for the per-task figures (0: skip)")
    args = parser.parse_args(argv)
    from tests.controlplane import cluster

    with tempfile.TemporaryDirectory(prefix="mcptasks-size-") as name:
        try:
            plane = cluster.ControlPlane(Path(name) / "plane", controllers=False)
        except cluster.ControlPlaneUnavailable as exc:
            print(f"no control plane: {exc}", file=sys.stderr)
            return 2
        with plane:
            figures = measure(plane)
            if args.tasks > 0:
                figures["many"] = measure_many(plane, args.tasks)
    print(json.dumps(figures, indent=2) if args.json else report(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
