"""The operator's composition: what `mcptasks operator` opens, runs and closes, in one place.

`run(wiring, stop)` opens the McpTask store and the McpTool catalog, serves the worker API for tool
pods, and runs until `stop` is set: kopf (`handlers`, standalone) for the Job and pod watches, the leader
election (`leadership`: a namespaced Lease), and, while this replica leads, the reconcile workers, the
warm tools, the slow resync and the expiry sweep (`aio.every`); the McpTools' conditions on every replica.
On the way out the Lease is released once nothing acts any more, so a standby takes over at once.
Everything opened is closed by one `AsyncExitStack`, in reverse order of opening; the background loops
are named tasks, cancelled and awaited for a bounded time when kopf stops. `cli/operator.py` only parses
settings and connects.

It never reads the environment or the settings tree: what it needs comes in `OperatorWiring`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field, replace

import kopf
from aiohttp import web
from kubernetes_asyncio.client import ApiClient, Configuration

from mcp_tasks import aio, observability
from mcp_tasks.observability import metrics
from mcp_tasks.operator.credentials import PodIdentity, TaskExecutions
from mcp_tasks.operator.events import EventRecorder, TaskEvent
from mcp_tasks.operator.handlers import build_registry
from mcp_tasks.operator.leadership import LeaderElection, LeaseTiming
from mcp_tasks.operator.reconciler import Reconciler
from mcp_tasks.operator.server_discovery import ServerDiscovery
from mcp_tasks.operator.settings import OperatorSettings
from mcp_tasks.operator.tool_status import write_tool_statuses
from mcp_tasks.operator.warm import PodTls
from mcp_tasks.operator.warm_tasks import WarmTaskRunner
from mcp_tasks.operator.warm_tools import WarmTools
from mcp_tasks.runner import RunnerSettings
from mcp_tasks.store.kubernetes import KubernetesTaskStore, KubernetesToolCatalog, client
from mcp_tasks.tasks.errors import StoreUnavailable
from mcp_tasks.tasks.interfaces import ArtifactStore, utc_now
from mcp_tasks.tasks.limits import LimitSettings
from mcp_tasks.tasks.servers import DEFAULT_FOLLOW_TOOLS
from mcp_tasks.worker import tls
from mcp_tasks.worker.api import create_worker_app
from mcp_tasks.worker.channel import WorkerChannel
from mcp_tasks.worker.executions import ChainedLookup, Execution
from mcp_tasks.worker.warm_auth import WarmCallSigner

logger = logging.getLogger("mcp_tasks.operator")


class StartupError(Exception):
    """The operator cannot start in this cluster as configured; the message says what to check."""


@dataclass(frozen=True, slots=True)
class OperatorWiring:
    """What one operator process works with (built by `cli/operator.py` from the settings tree).

    Attributes:
        api_client: an open API client (the caller closes it after `run`).
        namespace: the one namespace this operator serves.
        in_cluster: connected with the pod's service account (kopf then logs in with it too).
        operator: the operator's settings.
        runner: the runner settings the warm-task runner uses.
        watch_timeout_s: server-side timeout of each McpTask/McpTool WATCH, in seconds.
        artifacts: where large results are kept (files on the shared volume, or an S3 bucket); the caller
            opens it before `run` and closes it after.
        warm_call_signer: the operator's own warm-call key (`worker.warm_auth`; the chart's Secret, never the
            gateways' request-state key): signs the credentials of its warm calls, its public half goes into
            the warm Deployments' pods, and the worker tokens of warm calls are derived from it.
        identity: this replica's holder identity in the leader Lease (unique per process).
        warm_tls: how warm pods' HTTPS is verified (`MCPTASKS_WARM_TLS_CA_FILE`); `None`: plain HTTP.
        limits: the running budgets per tenant and principal the admission holds tasks to (`admission`).
        follow_tools: the gateways' handoff follow tool names, which no McpServer tool may take (the
            catalog's verdicts must match the gateways').
    """

    api_client: ApiClient
    namespace: str
    in_cluster: bool
    operator: OperatorSettings
    runner: RunnerSettings
    watch_timeout_s: int
    artifacts: ArtifactStore
    warm_call_signer: WarmCallSigner
    identity: str
    warm_tls: tls.PeerTls | None = None
    limits: LimitSettings = field(default_factory=LimitSettings)
    follow_tools: tuple[str, ...] = DEFAULT_FOLLOW_TOOLS


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


async def run(wiring: OperatorWiring, stop: asyncio.Event) -> None:
    """Run the operator until `stop` is set (kopf stops), then close everything it opened.

    Raises:
        StartupError: the McpTask/McpTool CRDs or RBAC are missing, or the API server does not answer
            (the message says what to check).
    """
    api, namespace, config = wiring.api_client, wiring.namespace, wiring.operator
    async with contextlib.AsyncExitStack() as stack:
        # full_objects=0: the operator reads no results; finished tasks are kept as summaries only
        store = KubernetesTaskStore(api, namespace, utc_now, wiring.watch_timeout_s, full_objects=0)
        stack.push_async_callback(store.aclose)
        stack.callback(observability.record_writes(store))
        catalog = KubernetesToolCatalog(api, namespace, wiring.watch_timeout_s, wiring.follow_tools)
        stack.push_async_callback(catalog.aclose)
        artifacts = wiring.artifacts
        try:
            await store.open()
            await catalog.open()
        except (client.ApiError, StoreUnavailable) as exc:
            raise StartupError(
                f"cannot watch McpTasks/McpTools in namespace {namespace!r}: {exc} "
                "(does the namespace exist? CRDs installed? RBAC of the operator's account? see docs/kubernetes.md)"
            ) from exc
        job_executions = TaskExecutions(PodIdentity(api, namespace, store), store, catalog)
        recorder = EventRecorder(api, namespace, store)
        recorder.start()
        stack.push_async_callback(recorder.aclose)
        stack.callback(store.observe(recorder.observe))
        reconciler = Reconciler(api, store, catalog, artifacts, config, utc_now, recorder.emit, wiring.limits)
        store.add_change_listener(reconciler.queue.add)
        store.add_change_listener(lambda _: reconciler.admission.wake())
        channel = WorkerChannel(store, artifacts, utc_now, config.inline_result_max_bytes)
        warm_tools = WarmTools(
            api,
            namespace,
            catalog,
            config.instance,
            wiring.warm_call_signer.public_pem,
            config.resync_interval_s,
            config.tool_defaults,
            PodTls(config.warm_tls_secret, config.worker_ca_secret),
            config.bridge_image,
        )
        warm_tasks = WarmTaskRunner(
            store,
            catalog,
            artifacts,
            utc_now,
            replace(wiring.runner, inline_result_max_bytes=config.inline_result_max_bytes),
            config.pod_worker_url,
            wiring.warm_call_signer,
            reconciler.job_exists,
            warm_tools.kill_pod,
            wiring.warm_tls,
            reconciler.admission,
        )
        reconciler.admission.wake_warm = warm_tasks.wake
        executions = ChainedLookup(warm_tasks, job_executions)

        def tool_running(execution: Execution) -> None:
            if execution.task_id is not None:
                tool = execution.tool.name if execution.tool is not None else "the tool"
                note = f"{tool} is running (attempt {execution.attempt})"
                recorder.emit(TaskEvent(execution.task_id, "ToolRunning", note, action="Run"))

        worker_app = create_worker_app(executions, channel, config.artifact_max_bytes + 64 * 1024, tool_running)
        server_discovery = ServerDiscovery(api, namespace, catalog, config)  # McpServers: Jobs, reports, status
        server_discovery.add_routes(worker_app)
        web_runner = web.AppRunner(worker_app, access_log=None, shutdown_timeout=5)
        await web_runner.setup()
        stack.push_async_callback(web_runner.cleanup)
        served = None
        if config.worker_tls_cert_file is not None and config.worker_tls_key_file is not None:
            served = tls.ServedCertificate(config.worker_tls_cert_file, config.worker_tls_key_file)
        serving_tls = None if served is None else served.context
        await web.TCPSite(web_runner, config.worker_host, config.worker_port, ssl_context=serving_tls).start()
        print(
            f"mcp-tasks operator: namespace {namespace}, worker API on {config.worker_host}:{config.worker_port} "
            f"(pods use {config.pod_worker_url})",
            flush=True,
        )

        async def activate() -> None:
            await reconciler.relist()
            print(f"mcp-tasks operator: leading in namespace {namespace} (reconciling)", flush=True)

        timing = LeaseTiming(
            config.leader_lease_duration_s, config.leader_renew_deadline_s, config.leader_retry_period_s
        )
        election = LeaderElection(api, namespace, config.leader_lease, wiring.identity, activate, timing, utc_now)
        stack.push_async_callback(election.release)  # after the loops below have stopped (the stack unwinds)

        async def sweep() -> None:
            """While leading: delete expired tasks, then refresh the task gauges (queued and running by tenant
            as the admission counts them) and the sweep's timestamp.

            `mcptasks_sweep_timestamp_seconds` moves only where tasks are reconciled: the alert's signal.
            """
            if election.leading.is_set():
                await reconciler.expire(reconciler.clock())
                metrics.swept(await reconciler.store.unfinished(), reconciler.clock())
                metrics.tenants_counted(reconciler.admission.tenant_counts(), wiring.limits.metrics_tenants)

        async def resync() -> None:
            """Queue every unfinished task (and every task with a Job or pod copy), while active: a safety
            net, never the deadlines. It lists nothing: a decision that a stale copy of a Job or pod could
            make wrong is confirmed on authoritative reads anyway (`decide.Plan.confirm`), and a full listing
            of 10,000 Jobs per resync would cost more CPU than everything else an idle operator does.
            """
            if election.leading.is_set():
                reconciler.resync()

        await warm_tasks.start()
        stack.push_async_callback(warm_tasks.aclose)
        background = [
            asyncio.create_task(write_tool_statuses(api, namespace, catalog), name="tool-status"),
            asyncio.create_task(warm_tools.run(election.leading), name="warm-tools"),
            asyncio.create_task(server_discovery.run(election.leading), name="server-discovery"),
            asyncio.create_task(election.run(), name="leader-election"),
            asyncio.create_task(reconciler.run_workers(election.leading), name="reconcile"),
            asyncio.create_task(reconciler.admission.run(election.leading), name="admission"),
            asyncio.create_task(
                aio.every(config.resync_interval_s, resync, "operator resync", log=logger), name="resync"
            ),
            asyncio.create_task(aio.every(config.sweep_interval_s, sweep, "operator sweep", log=logger), name="sweep"),
        ]
        if served is not None:
            reload = aio.every(tls.RELOAD_INTERVAL_S, served.refresh, "worker API certificate reload", log=logger)
            background.append(asyncio.create_task(reload, name="worker-tls-reload"))
        stack.push_async_callback(aio.cancel_and_wait, background, log=logger)
        connection = None if wiring.in_cluster else connection_info(api.configuration, namespace)
        registry = build_registry(reconciler, warm_tools, connection)
        if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
            logging.getLogger("kopf.objects").setLevel(logging.WARNING)  # "Handler ... succeeded" per event
        await kopf.operator(
            registry=registry,
            namespaces=[namespace],
            clusterwide=False,
            standalone=True,
            stop_flag=stop,
        )
