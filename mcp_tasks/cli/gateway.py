"""`mcptasks gateway`: the same gateway, on Kubernetes. Wiring only.

McpTask store + McpTool catalog (both watched through the API server) behind the gateway. Tasks are
run by the operator (`--runner none`, the default) or, for development and tests, by a local runner
in this process (`--runner local`). In a pod it uses the in-cluster config and the pod's namespace;
elsewhere a kubeconfig.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final

from aiohttp import web
from kubernetes_asyncio import config
from kubernetes_asyncio.client import ApiClient, Configuration

from mcp_tasks import __version__, observability
from mcp_tasks.cli.artifacts import artifact_store
from mcp_tasks.cli.serve import (
    authenticator_for,
    load_request_state_key,
    load_warm_call_signer,
    run_until_signalled,
    warm_peer_tls,
)
from mcp_tasks.cli.settings import KubernetesSettings, Settings, SettingsError, legacy_owner_issuer
from mcp_tasks.cli.token_reviews import TokenReviews
from mcp_tasks.gateway import Services, create_app
from mcp_tasks.gateway.warm_calls import WarmCallExecutor
from mcp_tasks.operator import leadership
from mcp_tasks.runner import LocalRunner
from mcp_tasks.store.kubernetes import KubernetesTaskStore, KubernetesToolCatalog, client
from mcp_tasks.store.kubernetes.client import close_api_client, open_api_client
from mcp_tasks.tasks.errors import StoreUnavailable
from mcp_tasks.tasks.inline import TaskBackedExecutor
from mcp_tasks.tasks.interfaces import ToolExecutor, utc_now
from mcp_tasks.worker.channel import WorkerChannel

logger = logging.getLogger("mcp_tasks.cli")

IN_CLUSTER_NAMESPACE_FILE: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


@dataclass(frozen=True, slots=True)
class Cluster:
    """An API client and the namespace the gateway works in."""

    api_client: ApiClient
    namespace: str
    in_cluster: bool = False


async def connect(settings: KubernetesSettings) -> Cluster:
    """Load in-cluster config (in a pod, without `--kubeconfig`) or a kubeconfig; pick the namespace.

    Raises:
        SettingsError: no usable configuration was found.
    """
    configuration = Configuration()
    namespace = settings.namespace
    in_cluster = settings.kubeconfig is None and bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    try:
        if in_cluster:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]  # unannotated upstream
            if namespace is None and IN_CLUSTER_NAMESPACE_FILE.is_file():
                namespace = IN_CLUSTER_NAMESPACE_FILE.read_text().strip()
        else:
            path = str(settings.kubeconfig) if settings.kubeconfig else None
            await config.load_kube_config(
                config_file=path, context=settings.context, client_configuration=configuration
            )
            if namespace is None:
                contexts, active = config.list_kube_config_contexts(config_file=path)
                chosen = next((c for c in contexts if c["name"] == settings.context), active)
                namespace = (chosen or {}).get("context", {}).get("namespace")
    except (config.ConfigException, OSError) as exc:
        raise SettingsError(f"no usable Kubernetes configuration: {exc} ({_config_hint(settings)})") from exc
    return Cluster(open_api_client(configuration), namespace or "default", in_cluster)


def _config_hint(settings: KubernetesSettings) -> str:
    """What to check next when the kubeconfig cannot be loaded."""
    if settings.context is not None:
        return f"is --context {settings.context!r} one of the contexts in `kubectl config get-contexts`?"
    named = os.environ.get("KUBECONFIG")
    if settings.kubeconfig is None and named:
        missing = [path for path in named.split(os.pathsep) if path and not Path(path).is_file()]
        if missing:
            return f"KUBECONFIG names {', '.join(missing)}, which does not exist"
    return "pass --kubeconfig FILE, set KUBECONFIG, or run in a pod"


async def operator_is_running(api_client: ApiClient, namespace: str, lease: str) -> bool:
    """Tell whether an operator leads in `namespace`: its leader Lease `lease` has a holder whose renew is
    not older than the Lease's duration (plus `LEASE_SKEW_S` for the clocks of two machines).

    Best effort: no permission, no Lease or no answer means "no operator seen".
    """
    apis = client.Apis(api_client)
    try:
        found = await client.call_json(apis.coordination.read_namespaced_lease, lease, namespace)
        until = leadership.held_until(found)
    except (client.ApiError, StoreUnavailable, ValueError):
        return False
    return until is not None and datetime.now(UTC) < until + timedelta(seconds=LEASE_SKEW_S)


LEASE_SKEW_S: Final = 5.0
"""Clock difference allowed between the operator that renewed its Lease and a gateway reading it, in seconds."""


async def build_gateway_app(settings: Settings) -> web.Application:
    """Connect to the cluster and create the gateway application (the watches start with the app).

    Raises:
        SettingsError: no Kubernetes configuration, or a bad token file.
    """
    kube = settings.kubernetes
    observability.install("gateway", *(("runner",) if kube.runner == "local" else ()))
    cluster = await connect(kube)
    data_dir = settings.serve.data_dir.resolve()
    gateway_settings = replace(
        settings.gateway, server_version=__version__, request_state_secret=load_request_state_key(data_dir)
    )
    artifacts = artifact_store(settings, data_dir, settings.runner.artifact_max_bytes)
    store = KubernetesTaskStore(
        cluster.api_client,
        cluster.namespace,
        utc_now,
        kube.watch_timeout_s,
        full_objects=kube.cache_full_objects,
        artifacts=artifacts,
        inline_arguments_max_bytes=kube.inline_arguments_max_bytes,
        legacy_issuer=legacy_owner_issuer(settings),
    )
    observability.record_writes(store)
    catalog = KubernetesToolCatalog(
        cluster.api_client, cluster.namespace, kube.watch_timeout_s, settings.gateway.follow_tool_names()
    )
    signer = load_warm_call_signer(settings)
    runner = (
        LocalRunner(
            store, catalog, artifacts, utc_now, settings.runner, warm_call_signer=signer, limits=settings.limits
        )
        if kube.runner == "local"
        else None
    )
    warm: WarmCallExecutor | None = None
    executor: ToolExecutor
    if runner is not None:
        executor = runner
    else:  # warm tools' synchronous calls go to their warm workers; the rest run as hidden tasks on Jobs
        channel = WorkerChannel(store, artifacts, utc_now, settings.runner.inline_result_max_bytes)
        hidden_tasks = TaskBackedExecutor(store, utc_now, settings.gateway.caller_watch_s)
        executor = warm = WarmCallExecutor(
            hidden_tasks, catalog.warm_endpoints, channel, signer, warm_peer_tls(settings)
        )
    services = Services(
        store=store,
        catalog=catalog,
        artifacts=artifacts,
        executor=executor,
        clock=utc_now,
        settings=gateway_settings,
        limits=settings.limits,
    )
    reviews = TokenReviews(cluster.api_client) if settings.auth.service_account_tokens else None
    authenticator = authenticator_for(settings, reviews)

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        try:
            await store.open()
            await catalog.open()
        except (client.ApiError, StoreUnavailable) as exc:
            await store.aclose()
            await close_api_client(cluster.api_client)
            raise SettingsError(
                f"cannot watch McpTasks/McpTools in namespace {cluster.namespace!r}: {exc} "
                "(are the CRDs installed? `mcptasks crds | kubectl apply -f -`; does the account have RBAC?)"
            ) from exc
        if runner is not None:
            if await operator_is_running(cluster.api_client, cluster.namespace, settings.operator.leader_lease):
                await catalog.aclose()
                await store.aclose()
                await close_api_client(cluster.api_client)
                raise SettingsError(
                    f"an operator serves namespace {cluster.namespace!r}: --runner local would run its tasks a "
                    "second time; use --runner none (the default) or another namespace"
                )
            await runner.start()
        await artifacts.open()
        if warm is not None:
            await warm.start()
        logger.info("watching McpTasks and McpTools in namespace %s", cluster.namespace)
        try:
            yield
        finally:
            if runner is not None:
                await runner.aclose()
            if warm is not None:
                await warm.aclose()
            await artifacts.aclose()
            await catalog.aclose()
            await store.aclose()
            await close_api_client(cluster.api_client)

    def readiness() -> str | None:  # local state only: a probe costs no API request
        return store.reflector.not_ready_reason() or catalog.not_ready_reason()

    app = create_app(services, authenticator, lifecycle, readiness=readiness)
    app[NAMESPACE_KEY] = cluster.namespace
    return app


NAMESPACE_KEY: Final = web.AppKey("namespace", str)


async def gateway(settings: Settings) -> None:
    """`mcptasks gateway`: run the Kubernetes-mode gateway until SIGINT/SIGTERM."""
    app = await build_gateway_app(settings)
    executor = "this process (--runner local)" if settings.kubernetes.runner == "local" else "the operator"
    where = f"namespace: {app[NAMESPACE_KEY]}  tasks run by: {executor}"
    await run_until_signalled(app, settings, where)
