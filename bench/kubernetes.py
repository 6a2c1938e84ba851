"""Benchmark of the Kubernetes-mode gateway on a real kube-apiserver: `python -m bench.kubernetes`.

Also `make bench-kubernetes`; results in `docs/performance.md` ("Kubernetes store (issue 3)").

What it measures, in one run, against a test control plane (`tests.controlplane.cluster.ControlPlane`:
etcd + kube-apiserver on loopback, no controller manager) and ONE `mcptasks gateway --runner none`:

1. `tools/call` → `CreateTaskResult` latency, p50/p99, 1 sequential client, through the gateway,
   against a BARE McpTask create of the same object posted straight to the API server: the McpTask
   the gateway created (GET from the API server, server-set metadata and the defaulted `status`
   stripped) POSTed with a fresh 32-hex name and the admin bearer token, by a bare aiohttp client
   (one `ClientSession`, keep-alive, TLS verified against the API server's CA), each answer checked
   to be `201` with that name. The copies go to a second namespace that no gateway watches, so the
   gateway's watch does not process them while the bare side is measured. Target: gateway p50 ≤
   1.3x bare p50. For information, a third side posts the same copies through kubernetes_asyncio
   (the gateway's own client library, its `ApiClient` built by `mcp_tasks.cli.gateway.connect`)
   without a gateway: it splits what the gateway adds into "client library" and "gateway proper".
2. `tasks/get` throughput (and p50/p99) with 32 concurrent clients from the one gateway replica, for
   tasks that already exist: they are served from the gateway's watch-fed cache. Target: ≥ 2,000
   requests/s. For information, also `tasks/get` latency with 1 client.

How: the control plane starts first and is not pinned (etcd and kube-apiserver may use both cores);
then the gateway is started pinned to the first allowed CPU (`os.sched_setaffinity`), and this
orchestrator, the load generator (`bench.loadgen`, a fresh process per phase) and the bare clients
(a fresh process per phase, `python -m bench.kubernetes bare-create --client aiohttp|kubernetes_asyncio`)
are pinned to the second. Nothing runs tasks (`--runner none`), so created tasks stay `working`.

Seeding: 100 sequential then 1,000 creates with 32 clients through the gateway (reported for
information), then every seeded task is completed through the project's own `KubernetesTaskStore`
(`transitions.complete` + compare-and-swap on the status subresource, as an operator would) and the
gateway is polled until it reads every one as `completed`: those are the ids `tasks/get` asks for
(`bench.wire.check_get` expects a completed task). The phases then run in `--rounds` interleaved
rounds (even rounds in reverse order). Latency samples are pooled over rounds; throughput is the
median round. The API server's and etcd's CPU time is read from /proc around each whole phase
(warm-up included).

Every answer is checked; a run with any error is invalid (exit status 1). Every process started here
(control plane, gateway, clients) is stopped on the way out, also on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import resource
import secrets
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, Final

import aiohttp
import yaml

from bench import loadgen, run, wire
from bench.run import Phase, Plan, Server
from mcp_tasks.store.kubernetes.resources import GROUP, TASK_PLURAL, VERSION

if TYPE_CHECKING:
    from tests.controlplane.cluster import ControlPlane

NAMESPACE: Final = "bench"
BARE_NAMESPACE: Final = "bench-bare"
TOOL_MANIFEST: Final = run.BENCH_DIR / "tools" / "bench_tools.yaml"
TARGET_CREATE_P50_X: Final = 1.3
TARGET_GET_RPS: Final = 2_000.0
MCPTASKS_API: Final = f"/apis/{GROUP}/{VERSION}"
SERVER_SET_METADATA: Final = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation")
USER_AGENT: Final = "OpenAPI-Generator/bench/python"
"""The bare client's User-Agent: the same field manager name as the gateway's kubernetes_asyncio client,
so the stored objects (`managedFields`) are the same size on both sides."""
_NAME_HOLE: Final = "%%NAME%%"
BARE_CLIENTS: Final = {"bare": "aiohttp", "kube": "kubernetes_asyncio"}
"""Phase kind → `bare-create --client`."""


@dataclass
class KubePlan:
    """Sizes of the seeding and of the measured phases."""

    rounds: int = 4
    create_requests: int = 500
    create_warmup: int = 100
    get_seconds: float = 5.0
    get_warmup_seconds: float = 1.0
    get_lat_requests: int = 500
    seed_warmup: int = 100
    seed_tasks: int = 1_000

    def create_plan(self) -> Plan:
        """The `bench.run.Plan` of a 1-client create phase."""
        return Plan(self.rounds, self.create_requests, self.create_warmup)

    def get_plan(self) -> Plan:
        """The `bench.run.Plan` of the `tasks/get` phases."""
        return Plan(self.rounds, self.get_lat_requests, 100, self.get_seconds, self.get_warmup_seconds)


# ---------------------------------------------------------------- the bare client (its own process)


@dataclass(frozen=True)
class ApiServer:
    """Where the API server is and how to authenticate, read from an admin kubeconfig."""

    server: str
    token: str
    ca_file: str

    @classmethod
    def from_kubeconfig(cls, path: Path) -> ApiServer:
        """Server, CA file and bearer token of the current context of `path` (token auth only)."""
        config = yaml.safe_load(path.read_text())
        context = next(c["context"] for c in config["contexts"] if c["name"] == config["current-context"])
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
        user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
        return cls(cluster["server"], user["token"], cluster["certificate-authority"])

    def ssl_context(self) -> ssl.SSLContext:
        """TLS verified against the API server's CA, host name checked."""
        return ssl.create_default_context(cafile=self.ca_file)

    def headers(self) -> dict[str, str]:
        """Headers of a JSON request with the admin token."""
        return {
            "Authorization": f"Bearer {self.token}",
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": USER_AGENT,
        }

    def get_json(self, path: str) -> dict[str, Any]:
        """GET `path` from the API server (urllib; setup only)."""
        request = urllib.request.Request(self.server + path, headers=self.headers())
        with urllib.request.urlopen(request, context=self.ssl_context(), timeout=30) as response:
            answer: dict[str, Any] = json.loads(response.read())
        return answer


def bare_template(task: dict[str, Any], namespace: str) -> str:
    """The body of a bare create: `task` without server-set fields, in `namespace`, with a name hole.

    Removes `uid`, `resourceVersion`, `creationTimestamp`, `managedFields`, `generation` and the
    `status` the API server defaulted (the gateway's POST has no `status`; the status subresource
    ignores it on create anyway), so the body matches what the gateway posts.
    """
    body = json.loads(json.dumps(task))
    for key in SERVER_SET_METADATA:
        body["metadata"].pop(key, None)
    body.pop("status", None)
    body["metadata"]["namespace"] = namespace
    body["metadata"]["name"] = _NAME_HOLE
    return json.dumps(body, separators=(",", ":"))


Post = Callable[[str], Awaitable[tuple[int, str | None]]]
"""POST one McpTask named `name`; return the HTTP status and the name in the answer."""


@contextlib.asynccontextmanager
async def aiohttp_poster(api: ApiServer, namespace: str, template: str) -> AsyncIterator[Post]:
    """A bare aiohttp client: one `ClientSession`, keep-alive, TLS verified; the body is `template` renamed."""
    url = f"{api.server}{MCPTASKS_API}/namespaces/{namespace}/{TASK_PLURAL}"
    headers = api.headers()
    connector = aiohttp.TCPConnector(limit=32, force_close=False, ssl=api.ssl_context())
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30)) as session:

        async def post(name: str) -> tuple[int, str | None]:
            body = template.replace(_NAME_HOLE, name, 1).encode()
            async with session.post(url, data=body, headers=headers) as response:
                status, raw = response.status, await response.read()
            return status, json.loads(raw).get("metadata", {}).get("name") if status == 201 else None

        yield post


@contextlib.asynccontextmanager
async def kubernetes_asyncio_poster(kubeconfig: Path, namespace: str, template: str) -> AsyncIterator[Post]:
    """The gateway's client library without the gateway: `create_namespaced_custom_object` of `template`.

    The `ApiClient` comes from `mcp_tasks.cli.gateway.connect`, as in the gateway.
    """
    from kubernetes_asyncio.client import CustomObjectsApi
    from kubernetes_asyncio.client.exceptions import ApiException

    from mcp_tasks.cli.gateway import connect
    from mcp_tasks.cli.settings import KubernetesSettings

    cluster = await connect(KubernetesSettings(kubeconfig=kubeconfig, namespace=namespace))
    objects = CustomObjectsApi(cluster.api_client)
    try:

        async def post(name: str) -> tuple[int, str | None]:
            body = json.loads(template.replace(_NAME_HOLE, name, 1))
            try:
                created = await objects.create_namespaced_custom_object(GROUP, VERSION, namespace, TASK_PLURAL, body)
            except ApiException as exc:
                return int(exc.status or 0), None
            return 201, str(created.get("metadata", {}).get("name"))

        yield post
    finally:
        await cluster.api_client.close()


async def bare_create(post: Post, requests: int, warmup: int, server_pid: int | None) -> dict[str, Any]:
    """POST `warmup` then `requests` McpTasks one after another; report like `bench.loadgen` does.

    Each McpTask gets a fresh 32-hex name; each answer must be `201` with that name.
    """
    errors: list[str] = []
    error_count = 0
    latencies: list[float] = []

    async def one() -> None:
        nonlocal error_count
        name = secrets.token_hex(16)
        started = time.perf_counter()
        try:
            status, answered = await post(name)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            error_count += 1
            if len(errors) < 5:
                errors.append(f"{type(exc).__name__}: {exc}")
            return
        finished = time.perf_counter()
        if status != 201 or answered != name:
            error_count += 1
            if len(errors) < 5:
                errors.append(f"HTTP {status}, name {answered!r}")
            return
        latencies.append(finished - started)

    for _ in range(warmup):
        await one()
    latencies.clear()
    started, cpu_self = time.perf_counter(), time.process_time()
    cpu_server = loadgen.process_cpu_s(server_pid) if server_pid else 0.0
    cpu_machine = loadgen.machine_busy_s()
    for _ in range(requests):
        await one()
    wall_s = time.perf_counter() - started
    return {
        "kind": "bare-create",
        "clients": 1,
        "requests": len(latencies),
        "wall_s": wall_s,
        "throughput_rps": len(latencies) / wall_s if wall_s > 0 else 0.0,
        "p50_ms": loadgen.percentile(latencies, 0.50) * 1000 if latencies else float("nan"),
        "p99_ms": loadgen.percentile(latencies, 0.99) * 1000 if latencies else float("nan"),
        "mean_ms": sum(latencies) / len(latencies) * 1000 if latencies else float("nan"),
        "errors": error_count,
        "error_samples": errors,
        "cpu_loadgen_s": time.process_time() - cpu_self,
        "cpu_server_s": (loadgen.process_cpu_s(server_pid) if server_pid else 0.0) - cpu_server,
        "cpu_machine_s": loadgen.machine_busy_s() - cpu_machine,
        "samples_s": latencies,
    }


async def _bare_phase(args: argparse.Namespace) -> dict[str, Any]:
    template = args.template.read_text()
    poster = (
        aiohttp_poster(ApiServer.from_kubeconfig(args.kubeconfig), args.namespace, template)
        if args.client == "aiohttp"
        else kubernetes_asyncio_poster(args.kubeconfig, args.namespace, template)
    )
    async with poster as post:
        return await bare_create(post, args.requests, args.warmup_requests, args.server_pid)


def bare_main(argv: list[str]) -> None:
    """`python -m bench.kubernetes bare-create ...`: one bare-create phase; prints a JSON report."""
    parser = argparse.ArgumentParser(prog="python -m bench.kubernetes bare-create")
    parser.add_argument("--kubeconfig", type=Path, required=True, help="admin kubeconfig (token auth)")
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--template", type=Path, required=True, help="body with a %%NAME%% hole (bare_template)")
    parser.add_argument("--requests", type=int, required=True)
    parser.add_argument("--warmup-requests", type=int, default=100)
    parser.add_argument("--server-pid", type=int, help="report this process's CPU time over the window")
    parser.add_argument("--samples-out", type=Path, help="also write the measured latencies (s) as JSON here")
    parser.add_argument("--client", choices=["aiohttp", "kubernetes_asyncio"], default="aiohttp")
    args = parser.parse_args(argv)
    result = asyncio.run(_bare_phase(args))
    samples = result.pop("samples_s")
    if args.samples_out:
        args.samples_out.write_text(json.dumps(samples))
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


# ---------------------------------------------------------------- orchestration


@dataclass
class Stack:
    """The running control plane and gateway, and where the pieces are."""

    plane: ControlPlane
    gateway: Server
    api: ApiServer
    tmp: Path

    def pid(self, component: str) -> int:
        """Pid of a control-plane component (`etcd`, `kube-apiserver`)."""
        return self.plane.processes[component].pid


def start_gateway(
    plane: ControlPlane,
    cpus: set[int] | None,
    tmp: Path,
    namespace: str = NAMESPACE,
    name: str = "gateway",
    timeout_s: float = 30,
) -> Server:
    """`mcptasks gateway --runner none` (via `bench.server`) on `namespace`, pinned to `cpus`.

    It listens once its cache has listed `namespace`: `timeout_s` (seconds) must cover that listing.
    """
    argv = [
        *(run.PYTHON, "-m", "bench.server", "gateway", "--kubeconfig", str(plane.kubeconfig)),
        *("--namespace", namespace, "--runner", "none", "--data-dir", str(tmp / name)),
        *("--host", "127.0.0.1", "--port", "0"),
    ]
    env = {key: value for key, value in os.environ.items() if not key.startswith("MCPTASKS_")}
    return run.start_server(name, argv, env, cpus, tmp, timeout_s=timeout_s)


async def complete_tasks(kubeconfig: Path) -> list[str]:
    """Complete every (working) McpTask in the bench namespace through `KubernetesTaskStore`; return their ids.

    The same write an executor makes: `transitions.complete` and a compare-and-swap PUT to the status
    subresource. 16 writes in flight.
    """
    from mcp_tasks.cli.gateway import connect
    from mcp_tasks.cli.settings import KubernetesSettings
    from mcp_tasks.store.kubernetes import KubernetesTaskStore
    from mcp_tasks.tasks import transitions
    from mcp_tasks.tasks.interfaces import Writer, utc_now

    cluster = await connect(KubernetesSettings(kubeconfig=kubeconfig, namespace=NAMESPACE))
    store = KubernetesTaskStore(cluster.api_client, NAMESPACE)
    try:
        await store.open()
        records = await store.list_runnable(utc_now(), 1_000_000)
        gate = asyncio.Semaphore(16)
        result = {"content": [{"type": "text", "text": "done: waited 1 s"}], "isError": False}

        async def complete(task_id: str) -> None:
            async with gate:
                record = await store.get(task_id)
                await store.compare_and_swap(transitions.complete(record, dict(result), utc_now()), Writer.EXECUTOR)

        await asyncio.gather(*(complete(record.task_id) for record in records))
        return [record.task_id for record in records]
    finally:
        await store.aclose()
        await cluster.api_client.close()


async def await_completed(url: str, ids: list[str], timeout_s: float = 60.0) -> None:
    """Poll the gateway until `tasks/get` answers every id as completed (checked by `bench.wire`).

    Raises:
        RuntimeError: some task did not read as completed within `timeout_s`.
    """
    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession() as session:
        for number, task_id in enumerate(ids, 1):
            while True:
                body, headers = wire.get_body(number, task_id), wire.get_headers(task_id)
                async with session.post(url, data=body, headers=headers) as response:
                    if wire.check_get(response.status, await response.read(), number, task_id):
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the gateway does not read task {task_id} as completed after {timeout_s} s")
                await asyncio.sleep(0.05)


def run_client(stack: Stack, argv: list[str], requests: int, warmup: int, cpus: set[int] | None) -> dict[str, Any]:
    """Run one client process (`bench.loadgen` or `bare-create`) pinned to `cpus`, sending `warmup`
    then `requests` requests; return its JSON report plus `samples_s`."""
    samples = stack.tmp / "samples.json"
    argv = [*argv, "--requests", str(requests), "--warmup-requests", str(warmup)]
    argv += ["--server-pid", str(stack.gateway.process.pid), "--samples-out", str(samples)]
    done = subprocess.run(
        argv, cwd=run.REPO, capture_output=True, timeout=300, preexec_fn=run._pinned(cpus), check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"client failed ({' '.join(argv[:4])}):\n{done.stderr.decode()[-3000:]}")
    report: dict[str, Any] = json.loads(done.stdout)
    report["samples_s"] = json.loads(samples.read_text())
    return report


def seed(stack: Stack, plan: KubePlan, load_cpus: set[int] | None) -> tuple[Path, Path, dict[str, Any]]:
    """Create tasks through the gateway, take the bare template from one, complete them all.

    Returns the ids file (completed tasks), the bare template file and the seeding run's report.
    """
    argv = [run.PYTHON, "-m", "bench.loadgen", "--url", stack.gateway.url, "--kind", "create", "--clients", "32"]
    report = run_client(stack, argv, plan.seed_tasks, plan.seed_warmup, load_cpus)
    if report["errors"]:
        raise RuntimeError(f"seeding failed: {report['error_samples']}")

    collection = f"{MCPTASKS_API}/namespaces/{NAMESPACE}/{TASK_PLURAL}"
    (created,) = stack.api.get_json(f"{collection}?limit=1")["items"]
    task = stack.api.get_json(f"{collection}/{created['metadata']['name']}")
    template = stack.tmp / "bare-template.json"
    template.write_text(bare_template(task, BARE_NAMESPACE))

    ids = asyncio.run(complete_tasks(stack.plane.kubeconfig))
    expected = plan.seed_tasks + plan.seed_warmup
    if len(ids) != expected:
        raise RuntimeError(f"found {len(ids)} working McpTasks after seeding, expected {expected}")
    asyncio.run(await_completed(stack.gateway.url, ids))
    ids_file = stack.tmp / "ids.json"
    ids_file.write_text(json.dumps(ids))
    return ids_file, template, report


@dataclass
class KubePhase:
    """One measured phase and how to run it."""

    phase: Phase
    plan: Plan


def run_phase(
    stack: Stack, item: KubePhase, load_cpus: set[int] | None, ids_file: Path, template: Path
) -> dict[str, Any]:
    """Run one phase in a fresh client process; add CPU times over the whole phase.

    Over the whole phase (client start-up and warm-up included): kube-apiserver, etcd, and *other*:
    the machine's busy time minus those two, the gateway and the client process (other sessions on a
    shared VM, kernel threads).
    """
    phase = item.phase
    before = {name: loadgen.process_cpu_s(stack.pid(name)) for name in ("kube-apiserver", "etcd")}
    before_gateway, before_children = loadgen.process_cpu_s(stack.gateway.process.pid), _children_cpu_s()
    before_machine = loadgen.machine_busy_s()
    started = time.perf_counter()
    if phase.kind in BARE_CLIENTS:
        argv = [run.PYTHON, "-m", "bench.kubernetes", "bare-create", "--kubeconfig", str(stack.plane.kubeconfig)]
        argv += ["--client", BARE_CLIENTS[phase.kind], "--namespace", BARE_NAMESPACE, "--template", str(template)]
        report = run_client(stack, argv, item.plan.latency_requests, item.plan.latency_warmup, load_cpus)
    else:
        ids = ids_file if phase.kind == "get" else None
        report = run.run_loadgen(stack.gateway, phase.kind, phase.clients, item.plan, load_cpus, stack.tmp, ids)
    report["phase_wall_s"] = time.perf_counter() - started
    for name, cpu in before.items():
        report[f"cpu_{name}_s"] = loadgen.process_cpu_s(stack.pid(name)) - cpu
    accounted = report["cpu_kube-apiserver_s"] + report["cpu_etcd_s"] + _children_cpu_s() - before_children
    accounted += loadgen.process_cpu_s(stack.gateway.process.pid) - before_gateway
    report["cpu_other_s"] = max(0.0, loadgen.machine_busy_s() - before_machine - accounted)
    report["sent"] = report["requests"] + (item.plan.latency_warmup if phase.clients == 1 else 0)
    return report


def _children_cpu_s() -> float:
    """User + system CPU seconds of this process's finished children (the client processes)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def phases(plan: KubePlan) -> list[KubePhase]:
    """The measured phases, in the order of odd rounds."""
    create, get = plan.create_plan(), plan.get_plan()
    return [
        KubePhase(Phase("create_lat", "`tools/call` → `CreateTaskResult` (gateway)", "gateway", "create", 1), create),
        KubePhase(Phase("bare_lat", "bare McpTask create (aiohttp POST to the API server)", "api", "bare", 1), create),
        KubePhase(Phase("kube_lat", "same POST through kubernetes_asyncio, no gateway", "api", "kube", 1), create),
        KubePhase(Phase("get_rps", "`tasks/get` (cache)", "gateway", "get", 32, ids="completed"), get),
        KubePhase(Phase("get_lat", "`tasks/get` (cache)", "gateway", "get", 1, ids="completed"), get),
    ]


# ---------------------------------------------------------------- figures


def control_plane_cpu(phase: Phase, component: str) -> float:
    """CPU seconds `component` used over the whole phase (all rounds)."""
    return float(sum(r[f"cpu_{component}_s"] for r in phase.rounds))


def summary_rows(by_key: dict[str, Phase]) -> list[list[str]]:
    """The headline table: figure, reference, ratio, target, verdict."""
    create, bare, get_rps, get_lat = by_key["create_lat"], by_key["bare_lat"], by_key["get_rps"], by_key["get_lat"]
    kube = by_key["kube_lat"]
    p50_x = create.p(0.5) / bare.p(0.5)
    p99_x = create.p(0.99) / bare.p(0.99)
    return [
        [
            "1. `tools/call` → `CreateTaskResult` p50, 1 client",
            f"{create.p(0.5):.2f} ms",
            f"bare POST {bare.p(0.5):.2f} ms",
            f"{p50_x:.2f}x (+{create.p(0.5) - bare.p(0.5):.2f} ms)",
            f"≤ {TARGET_CREATE_P50_X:.1f}x",
            run.verdict(p50_x <= TARGET_CREATE_P50_X),
        ],
        [
            "1. `tools/call` → `CreateTaskResult` p99, 1 client",
            f"{create.p(0.99):.2f} ms",
            f"bare POST {bare.p(0.99):.2f} ms",
            f"{p99_x:.2f}x",
            "(no target)",
            "info",
        ],
        [
            "(info) the same McpTask POST through kubernetes_asyncio (the gateway's client), p50",
            f"{kube.p(0.5):.2f} ms",
            f"bare POST {bare.p(0.5):.2f} ms",
            f"{kube.p(0.5) / bare.p(0.5):.2f}x (+{kube.p(0.5) - bare.p(0.5):.2f} ms)",
            "(no target)",
            "info",
        ],
        [
            "2. `tasks/get` throughput, 32 clients, 1 replica",
            f"{get_rps.rps:,.0f} req/s",
            "—",
            "—",
            f"≥ {TARGET_GET_RPS:,.0f} req/s",
            run.verdict(get_rps.rps >= TARGET_GET_RPS),
        ],
        [
            "2. `tasks/get` p50 / p99, 32 clients",
            f"{get_rps.p(0.5):.2f} / {get_rps.p(0.99):.2f} ms",
            "—",
            "—",
            "(no target)",
            "info",
        ],
        [
            "(info) `tasks/get` p50 / p99, 1 client",
            f"{get_lat.p(0.5):.2f} / {get_lat.p(0.99):.2f} ms",
            "—",
            "—",
            "(no target)",
            "info",
        ],
    ]


def detail_rows(items: list[Phase]) -> list[list[str]]:
    """One row per phase: absolute figures and where the CPU went."""
    rows = []
    for phase in items:
        rps = [r["throughput_rps"] for r in phase.rounds]
        sent = sum(r["sent"] for r in phase.rounds)
        wall = sum(r["phase_wall_s"] for r in phase.rounds)
        api_s, etcd_s = control_plane_cpu(phase, "kube-apiserver"), control_plane_cpu(phase, "etcd")
        per_request = phase.clients == 1 or phase.kind == "create"
        rows.append(
            [
                phase.title,
                str(phase.clients),
                f"{sum(r['requests'] for r in phase.rounds):,}",
                f"{phase.rps:,.0f}" + (f" ({min(rps):,.0f}-{max(rps):,.0f})" if len(rps) > 1 else ""),
                f"{phase.p(0.5):.2f}",
                f"{phase.p(0.99):.2f}",
                str(phase.errors),
                f"{phase.server_cpu_share:.0%} / {phase.server_cpu_us_per_request:,.0f} µs",
                f"{api_s / sent * 1e6:,.0f} µs" if per_request else f"{api_s / wall:.0%} of a core",
                f"{etcd_s / sent * 1e6:,.0f} µs" if per_request else f"{etcd_s / wall:.0%} of a core",
                f"{phase.loadgen_cpu_share:.0%}",
                f"{sum(r['cpu_other_s'] for r in phase.rounds) / wall:.0%}",
            ]
        )
    return rows


def _first_line(argv: list[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=30)
    return (done.stdout or done.stderr).strip().splitlines()[0] if (done.stdout or done.stderr).strip() else "?"


def machine(stack: Stack, gateway_cpus: set[int] | None, load_cpus: set[int] | None) -> list[str]:
    """The machine lines of the report."""
    bin_dir = Path(stack.plane.bin_dir)
    pinning = (
        f"gateway on CPU {sorted(gateway_cpus)}; load generator, bare client and orchestrator on CPU "
        f"{sorted(load_cpus)}; etcd and kube-apiserver not pinned (both CPUs)"
        if gateway_cpus and load_cpus
        else "none (fewer than 2 CPUs available)"
    )
    return [
        f"- nproc: {os.cpu_count()}; CPU: {run._cpu_model()}",
        f"- Linux {platform.release()}; Python {platform.python_version()}; aiohttp {metadata.version('aiohttp')}; "
        f"kubernetes_asyncio {metadata.version('kubernetes_asyncio')}",
        f"- {_first_line([str(bin_dir / 'kube-apiserver'), '--version'])} (kube-apiserver); "
        f"{_first_line([str(bin_dir / 'etcd'), '--version'])} (`--unsafe-no-fsync`); "
        f"data in {stack.tmp}: {run._filesystem(stack.tmp)}",
        f"- pinning: {pinning}",
    ]


# ---------------------------------------------------------------- main


def measure(plan: KubePlan, tmp: Path, gateway_cpus: set[int] | None, load_cpus: set[int] | None) -> int:
    """Start everything, seed, run the rounds, print and write the tables; 1 if any request failed."""
    from tests.controlplane import cluster

    print("starting etcd and kube-apiserver…", flush=True)
    try:
        plane = cluster.ControlPlane(tmp / "plane", controllers=False)
    except cluster.ControlPlaneUnavailable as exc:
        print(f"bench.kubernetes: {exc}", file=sys.stderr)
        return 2
    with plane:
        # The control plane inherited this process's (unpinned) affinity; from here on it is CPU 1.
        if load_cpus is not None:
            os.sched_setaffinity(0, load_cpus)
        for namespace in (NAMESPACE, BARE_NAMESPACE):
            plane.kubectl("create", "namespace", namespace)
        plane.kubectl("apply", "-n", NAMESPACE, "-f", str(TOOL_MANIFEST))
        gateway = start_gateway(plane, gateway_cpus, tmp)
        try:
            stack = Stack(plane, gateway, ApiServer.from_kubeconfig(plane.kubeconfig), tmp)
            print(f"seeding {plan.seed_warmup} + {plan.seed_tasks:,} tasks through the gateway…", flush=True)
            started = time.monotonic()
            ids_file, template, seeding = seed(stack, plan, load_cpus)
            print(
                f"  {seeding['requests']} creates at 32 clients: {seeding['throughput_rps']:,.0f} req/s, "
                f"p50 {seeding['p50_ms']:.2f} ms; completed and visible in {time.monotonic() - started:.1f} s",
                flush=True,
            )
            items = phases(plan)
            for number in range(1, plan.rounds + 1):
                print(f"round {number}/{plan.rounds}", flush=True)
                for item in items if number % 2 else list(reversed(items)):  # even rounds backwards: no order bias
                    report = run_phase(stack, item, load_cpus, ids_file, template)
                    item.phase.rounds.append(report)
                    print(
                        f"  {item.phase.key:<11} {report['requests']:>6} req  {report['throughput_rps']:>8,.0f} req/s  "
                        f"p50 {report['p50_ms']:6.2f} ms  p99 {report['p99_ms']:6.2f} ms  errors {report['errors']}"
                        + (f"  {report['error_samples'][:2]}" if report["errors"] else ""),
                        flush=True,
                    )
            stored = len(plane.kubectl("get", "mcptasks", "-n", NAMESPACE, "-o", "name").split())
            log = gateway.log.read_text(errors="replace")
            logged_errors = "Traceback" in log or " ERROR " in log
            if logged_errors:
                print(f"warning: the gateway logged errors; see {gateway.log}", flush=True)
            lines = machine(stack, gateway_cpus, load_cpus)
        finally:
            run.stop_server(gateway)

    by_key = {item.phase.key: item.phase for item in items}
    errors = sum(phase.errors for phase in by_key.values())
    template_bytes = len(template.read_text().replace(_NAME_HOLE, "0" * 32))
    section = "\n".join(
        [
            f"### Results ({time.strftime('%Y-%m-%d %H:%M %Z')})",
            "",
            *lines,
            f"- plan: {plan.rounds} interleaved rounds (even ones in reverse order); creates: "
            f"{plan.create_requests} sequential per round and side after {plan.create_warmup} warm-up "
            f"(latencies pooled); `tasks/get`: 32 clients for {plan.get_seconds:g} s after "
            f"{plan.get_warmup_seconds:g} s warm-up (median round), 1 client {plan.get_lat_requests} per round; "
            f"`tools/call` body {len(wire.create_body(1))} bytes, bare McpTask body {template_bytes} bytes",
            f"- `tasks/get` ids: {plan.seed_warmup + plan.seed_tasks:,} completed tasks; McpTasks in the gateway's "
            f"namespace at the end: {stored:,}",
            f"- (info) seeding, one run: {seeding['requests']:,} `tools/call` creates at 32 clients, "
            f"{seeding['throughput_rps']:,.0f} req/s, p50 {seeding['p50_ms']:.2f} ms, p99 {seeding['p99_ms']:.2f} ms, "
            f"gateway CPU {seeding['cpu_server_s'] / seeding['wall_s']:.0%}",
            f"- errors: {errors}"
            + ("" if errors == 0 else " — INVALID RUN")
            + ("; the gateway logged errors" if logged_errors else "; the gateway logged no error"),
            "",
            run.markdown_table(
                ["measure", "mcp-tasks (Kubernetes)", "reference", "ratio", "target", "verdict"], summary_rows(by_key)
            ),
            "",
            run.markdown_table(
                [
                    "phase",
                    "clients",
                    "requests",
                    "req/s (median, range)",
                    "p50 ms",
                    "p99 ms",
                    "errors",
                    "gateway CPU (share / per req)",
                    "kube-apiserver CPU",
                    "etcd CPU",
                    "client CPU",
                    "other CPU",
                ],
                detail_rows(list(by_key.values())),
            ),
            "",
            "Gateway and client CPU are measured over the measured window (shares of one core; gateway also per "
            "request). kube-apiserver and etcd CPU are measured over each whole phase, client start-up and warm-up "
            "included: per request sent for the 1-client phases, as a share of one core for the 32-client phase. "
            "Other CPU is the rest of the machine's busy time over each whole phase (other sessions on the VM, "
            "kernel threads), as a share of one core.",
        ]
    )
    print()
    print(section)
    run.RESULTS_DIR.mkdir(exist_ok=True)
    (run.RESULTS_DIR / "kubernetes.md").write_text(section + "\n")
    (run.RESULTS_DIR / "kubernetes.json").write_text(
        json.dumps({k: [{x: y for x, y in r.items() if x != "samples_s"} for r in p.rounds] for k, p in by_key.items()})
    )
    print(f"\nwritten to {run.RESULTS_DIR / 'kubernetes.md'}")
    if errors:
        print("INVALID RUN: some requests failed", file=sys.stderr)
        return 1
    return 0


def _terminate(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwinds through the `finally`s that stop the gateway and the control plane


def main() -> None:
    """`python -m bench.kubernetes [--rounds N] [--quick] [--keep]`, or the `bare-create` client."""
    if sys.argv[1:2] == ["bare-create"]:
        bare_main(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(prog="python -m bench.kubernetes", description=__doc__.split("\n\n")[0])
    defaults = KubePlan()
    parser.add_argument("--rounds", type=int, default=defaults.rounds, help="interleaved rounds (default 4)")
    parser.add_argument("--create-requests", type=int, default=defaults.create_requests, help="per round and side")
    parser.add_argument("--create-warmup", type=int, default=defaults.create_warmup, help="per round and side")
    parser.add_argument("--seconds", type=float, default=defaults.get_seconds, help="32-client `tasks/get` seconds")
    parser.add_argument("--quick", action="store_true", help="1 round, 100 creates, 2 s (smoke test)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (logs, etcd data)")
    parser.add_argument("--tmp", type=Path, help="parent folder of the temporary folder (default: $TMPDIR)")
    args = parser.parse_args()
    plan = KubePlan(args.rounds, args.create_requests, args.create_warmup, args.seconds)
    if args.quick:
        plan = KubePlan(1, 100, 20, 2.0, 1.0, 100, 20, 200)
    signal.signal(signal.SIGTERM, _terminate)

    allowed = sorted(os.sched_getaffinity(0))
    gateway_cpus, load_cpus = ({allowed[0]}, {allowed[1]}) if len(allowed) >= 2 else (None, None)
    if load_cpus is None:
        print("warning: fewer than 2 CPUs; gateway and load generator share the CPU", file=sys.stderr)
    tmp = Path(tempfile.mkdtemp(prefix="mcptasks-bench-k8s-", dir=args.tmp))
    try:
        code = measure(plan, tmp, gateway_cpus, load_cpus)
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(code)


if __name__ == "__main__":
    main()
