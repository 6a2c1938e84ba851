"""`mcptasks operator`: run McpTasks as Kubernetes Jobs. Wiring only.

Connects like `mcptasks gateway` (in-cluster config or a kubeconfig), serves `/metrics`, and runs the
operator (`operator.app.run`) until SIGINT/SIGTERM; then closes the API client.
"""

from __future__ import annotations

import asyncio
import secrets
import signal
import socket

from mcp_tasks import observability
from mcp_tasks.cli.artifacts import artifact_store
from mcp_tasks.cli.gateway import connect
from mcp_tasks.cli.serve import load_warm_call_signer, start_metrics, warm_peer_tls
from mcp_tasks.cli.settings import Settings, SettingsError
from mcp_tasks.operator import app
from mcp_tasks.store.kubernetes.client import close_api_client


async def operator(settings: Settings) -> None:
    """`mcptasks operator`: run until SIGINT/SIGTERM.

    Raises:
        SettingsError: no usable Kubernetes configuration, or the cluster is not ready for the operator
            (CRDs, RBAC, namespace).
    """
    observability.install("operator")
    cluster = await connect(settings.kubernetes)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    data_dir = settings.serve.data_dir.resolve()
    artifacts = artifact_store(settings, data_dir, settings.operator.artifact_max_bytes)
    wiring = app.OperatorWiring(
        api_client=cluster.api_client,
        namespace=cluster.namespace,
        in_cluster=cluster.in_cluster,
        operator=settings.operator,
        runner=settings.runner,
        watch_timeout_s=settings.kubernetes.watch_timeout_s,
        artifacts=artifacts,
        warm_call_signer=load_warm_call_signer(settings),
        warm_tls=warm_peer_tls(settings),
        limits=settings.limits,
        follow_tools=settings.gateway.follow_tool_names(),
        # client-go's shape: the pod's name, and a suffix so that a restarted process is a new holder
        identity=f"{socket.gethostname()}_{secrets.token_hex(4)}",
    )
    metrics_runner = None
    try:
        await artifacts.open()
        metrics_runner = await start_metrics(settings, settings.operator.worker_host)
        await app.run(wiring, stop)
    except app.StartupError as exc:
        raise SettingsError(str(exc)) from exc
    finally:
        if metrics_runner is not None:
            await metrics_runner.cleanup()
        await artifacts.aclose()
        await close_api_client(cluster.api_client)
