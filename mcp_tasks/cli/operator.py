"""`mcptasks operator`: run McpTasks as Kubernetes Jobs. Wiring only.

Connects like `mcptasks gateway` (in-cluster config or a kubeconfig), opens the McpTask store and the
McpTool catalog, serves the worker API for tool pods, and runs until SIGINT/SIGTERM: kopf
(`operator.handlers`) for the Job and pod watches and peering, the reconcile workers while this replica
is the active one (`operator.peering`), the slow resync, and the expiry sweep.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import signal
from collections.abc import Callable
from dataclasses import replace

import kopf
from aiohttp import web
from kubernetes_asyncio.client import ApiClient, Configuration, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException

from mcp_tasks.cli.gateway import api_error, connect
from mcp_tasks.cli.serve import load_request_state_key, start_metrics
from mcp_tasks.cli.settings import Settings, SettingsError
from mcp_tasks.observability import metrics
from mcp_tasks.operator.credentials import PodIdentity, TaskExecutions
from mcp_tasks.operator.events import EventRecorder, TaskEvent
from mcp_tasks.operator.handlers import build_registry
from mcp_tasks.operator.jobs import object_name
from mcp_tasks.operator.peering import ActivePeer
from mcp_tasks.operator.reconciler import Reconciler
from mcp_tasks.operator.tool_status import write_tool_statuses
from mcp_tasks.operator.warm_tasks import WarmTaskRunner, worker_key
from mcp_tasks.operator.warm_tools import WarmTools
from mcp_tasks.store.artifacts import FileArtifactStore
from mcp_tasks.store.kubernetes import KubernetesTaskStore, KubernetesToolCatalog
from mcp_tasks.store.kubernetes.client import close_api_client
from mcp_tasks.tasks.interfaces import add_write_observer, utc_now
from mcp_tasks.worker.api import create_worker_app
from mcp_tasks.worker.channel import WorkerChannel
from mcp_tasks.worker.executions import ChainedLookup, Execution

logger = logging.getLogger("mcp_tasks.cli")


def connection_info(configuration: Configuration, namespace: str) -> kopf.ConnectionInfo:
    """Kopf's credentials, taken from the kubernetes_asyncio configuration (one login for both clients)."""
    keys = configuration.api_key or {}
    authorization = keys.get("BearerToken") or keys.get("authorization") or ""
    scheme, _, token = authorization.partition(" ")
    return kopf.ConnectionInfo(
        server=str(configuration.host),
        ca_path=configuration.ssl_ca_cert,
        insecure=not configuration.verify_ssl,
        scheme=scheme or None,
        token=token or None,
        certificate_path=configuration.cert_file,
        private_key_path=configuration.key_file,
        default_namespace=namespace,
    )


async def ensure_peering(api: ApiClient, namespace: str, name: str) -> None:
    """Create the namespace's `KopfPeering` object if missing (kopf needs it to coordinate replicas).

    Raises:
        SettingsError: the KopfPeering CRD is not installed.
    """
    body = {"apiVersion": "kopf.dev/v1", "kind": "KopfPeering", "metadata": {"name": name}}
    try:
        await CustomObjectsApi(api).create_namespaced_custom_object("kopf.dev", "v1", namespace, "kopfpeerings", body)
    except ApiException as exc:
        if exc.status == 404:
            raise SettingsError(
                "the KopfPeering CRD is not installed: `mcptasks crds | kubectl apply --server-side -f -`"
            ) from exc
        if exc.status != 409:
            raise


async def operator(settings: Settings) -> None:
    """`mcptasks operator`: run until SIGINT/SIGTERM."""
    cluster = await connect(settings.kubernetes)
    api, namespace, config = cluster.api_client, cluster.namespace, settings.operator
    # full_objects=0: the operator reads no results; finished tasks are kept as summaries only
    store = KubernetesTaskStore(api, namespace, utc_now, settings.kubernetes.watch_timeout_s, full_objects=0)
    catalog = KubernetesToolCatalog(api, namespace, settings.kubernetes.watch_timeout_s)
    artifacts = FileArtifactStore(settings.serve.data_dir.resolve() / "artifacts", config.artifact_max_bytes)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    web_runner: web.AppRunner | None = None
    metrics_runner: web.AppRunner | None = None
    recorder: EventRecorder | None = None
    stop_observing: Callable[[], None] | None = None
    background: list[asyncio.Task[None]] = []
    warm_tasks: WarmTaskRunner | None = None
    try:
        try:
            await store.open()
            await catalog.open()
            await ensure_peering(api, namespace, config.peering)
        except ApiException as exc:
            raise SettingsError(
                f"cannot watch McpTasks/McpTools in namespace {namespace!r}: {api_error(exc)} "
                "(does the namespace exist? CRDs installed? RBAC of the operator's account? see docs/kubernetes.md)"
            ) from exc
        job_executions = TaskExecutions(PodIdentity(api, namespace, store), store, catalog)
        recorder = EventRecorder(api, namespace, store)
        recorder.start()
        stop_observing = add_write_observer(recorder.observe)
        reconciler = Reconciler(api, store, catalog, artifacts, config, utc_now, recorder.emit)
        store.add_change_listener(reconciler.queue.add)
        channel = WorkerChannel(store, artifacts, utc_now, config.inline_result_max_bytes)
        warm_tools = WarmTools(api, namespace, catalog, config.instance, config.resync_interval_s)
        warm_tasks = WarmTaskRunner(
            store,
            catalog,
            artifacts,
            utc_now,
            replace(settings.runner, inline_result_max_bytes=config.inline_result_max_bytes),
            config.pod_worker_url,
            worker_key(load_request_state_key(settings.serve.data_dir.resolve())),
            lambda task_id: _job_exists(reconciler, task_id),
            warm_tools.kill_pod,
        )
        executions = ChainedLookup(warm_tasks, job_executions)

        def tool_running(execution: Execution) -> None:
            if execution.task_id is not None:
                tool = execution.tool.name if execution.tool is not None else "the tool"
                note = f"{tool} is running (attempt {execution.attempt})"
                recorder.emit(TaskEvent(execution.task_id, "ToolRunning", note, action="Run"))

        worker_app = create_worker_app(executions, channel, config.artifact_max_bytes + 64 * 1024, tool_running)
        web_runner = web.AppRunner(worker_app, access_log=None, shutdown_timeout=5)
        await web_runner.setup()
        await web.TCPSite(web_runner, config.worker_host, config.worker_port).start()
        print(
            f"mcp-tasks operator: namespace {namespace}, worker API on {config.worker_host}:{config.worker_port} "
            f"(pods use {config.pod_worker_url})",
            flush=True,
        )
        metrics_runner = await start_metrics(settings, config.worker_host)
        priority = random.randint(1, 2**31 - 1)  # not a secret: distinct priorities, so replicas never both pause

        async def activate() -> None:
            await reconciler.relist()
            print(f"mcp-tasks operator: active in namespace {namespace} (reconciling)", flush=True)

        peer = ActivePeer(api, namespace, config.peering, priority, activate)
        await warm_tasks.start()
        background = [
            asyncio.create_task(write_tool_statuses(api, namespace, catalog), name="tool-status"),
            asyncio.create_task(warm_tools.run(peer.active), name="warm-tools"),
            asyncio.create_task(peer.run(), name="peering"),
            asyncio.create_task(reconciler.run_workers(peer.active), name="reconcile"),
            asyncio.create_task(_resync_forever(reconciler, peer.active, config.resync_interval_s), name="resync"),
            asyncio.create_task(_sweep_forever(reconciler, peer.active, config.sweep_interval_s), name="sweep"),
        ]
        connection = None if cluster.in_cluster else connection_info(api.configuration, namespace)
        registry = build_registry(reconciler, warm_tools, connection, config.peering, priority)
        if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
            logging.getLogger("kopf.objects").setLevel(logging.WARNING)  # "Handler ... succeeded" per event
        await kopf.operator(
            registry=registry,
            namespaces=[namespace],
            clusterwide=False,
            peering_name=config.peering,
            stop_flag=stop,
        )
    finally:
        if warm_tasks is not None:
            await warm_tasks.aclose()
        for task in background:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if web_runner is not None:
            await web_runner.cleanup()
        if metrics_runner is not None:
            await metrics_runner.cleanup()
        if stop_observing is not None:
            stop_observing()
        if recorder is not None:
            await recorder.aclose()
        await catalog.aclose()
        await store.aclose()
        await close_api_client(api)


async def _job_exists(reconciler: Reconciler, task_id: str) -> bool:
    """Whether task `task_id` has a Job: the operator's copy, else a GET (copies lag, and a standby has none)."""
    if reconciler.children.job(task_id) is not None:
        return True
    try:
        await reconciler.batch.read_namespaced_job(object_name(task_id), reconciler.namespace)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


async def _sweep_forever(reconciler: Reconciler, active: asyncio.Event, interval_s: float) -> None:
    """Delete expired tasks (while this replica is active) and refresh the task gauges, every `interval_s`."""
    while True:
        try:
            if active.is_set():
                await reconciler.expire(reconciler.clock())
            metrics.swept(await reconciler.store.unfinished(), reconciler.clock())
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("operator sweep failed; retrying")
        await asyncio.sleep(interval_s)


async def _resync_forever(reconciler: Reconciler, active: asyncio.Event, interval_s: float) -> None:
    """Queue every unfinished task (and every task with a Job or pod copy) every `interval_s`, while
    active: a safety net, never the deadlines. It lists nothing: a decision that a stale copy of a Job
    or pod could make wrong is confirmed on authoritative reads anyway (`decide.Plan.confirm`), and a
    full listing of 10,000 Jobs per resync would cost more CPU than everything else an idle operator does.
    """
    while True:
        await asyncio.sleep(interval_s)
        if active.is_set():
            reconciler.resync()
