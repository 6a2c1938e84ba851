"""`mcptasks serve`: the embedded default, wired together. Wiring only.

SQLite store + file tool catalog + file (or S3) artifact store + local runner, behind the gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import signal
import socket
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path

from aiohttp import web

from mcp_tasks import __version__, aio, gateway, observability
from mcp_tasks.cli.artifacts import artifact_store
from mcp_tasks.cli.settings import Settings, SettingsError, legacy_owner_issuer
from mcp_tasks.gateway import MCP_PATH, Services, TokenFileAuthenticator, create_app
from mcp_tasks.gateway.auth import Authenticator
from mcp_tasks.gateway.identity.gate import Gate, TokenReviewer
from mcp_tasks.observability.endpoint import start_metrics_server
from mcp_tasks.runner import LocalRunner
from mcp_tasks.store.manifests import FileToolCatalog
from mcp_tasks.store.sqlite import SqliteTaskStore
from mcp_tasks.tasks.interfaces import utc_now
from mcp_tasks.worker import tls, warm_auth
from mcp_tasks.worker.warm_auth import WarmCallSigner

logger = logging.getLogger("mcp_tasks.cli")

LINGERING_TIME_S = 1.0
"""How long aiohttp keeps draining a request body it answered early (e.g. 413), in seconds (aiohttp: 10)."""


def private_folder(data_dir: Path) -> Path:
    """`data_dir`, created if needed and made readable by its owner only (mode 0700).

    It holds every tenant's tasks (arguments, answers, results), artifacts and the server's keys, so no
    other local account may look inside; a folder this user does not own keeps its mode, with a warning.
    """
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    if data_dir.stat().st_mode & 0o077:
        try:
            data_dir.chmod(0o700)
        except PermissionError:
            logger.warning("data folder %s is readable by other users and not ours to change (chmod 700 it)", data_dir)
    return data_dir


def load_key(data_dir: Path, name: str, make: Callable[[], bytes] = lambda: secrets.token_bytes(32)) -> bytes:
    """A secret key in `data_dir/name`, created once (`make()`, default 32 random bytes; mode 0600, fsynced).

    Restarts and sibling processes on the same data folder share it; of two concurrent creators, the
    first one's key wins, and none reads a half-written one: it is written aside, then linked into place.
    """
    path = data_dir / name
    data_dir.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        aside = data_dir / f".{name}.{secrets.token_hex(4)}"
        fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(make())
                handle.flush()
                os.fsync(handle.fileno())
            with contextlib.suppress(FileExistsError):
                os.link(aside, path)
        finally:
            aside.unlink()
    return path.read_bytes()


def warm_peer_tls(settings: Settings) -> tls.PeerTls | None:
    """How warm pods' HTTPS is verified (`MCPTASKS_WARM_TLS_CA_FILE`, `MCPTASKS_WARM_TLS_SERVER_NAME`); `None`
    without a CA file (plain HTTP).

    Raises:
        SettingsError: the CA file cannot be read or holds no PEM certificate.
    """
    kube = settings.kubernetes
    if kube.warm_tls_ca_file is None:
        return None
    try:
        return tls.PeerTls(tls.client_context(kube.warm_tls_ca_file), kube.warm_tls_server_name)
    except (OSError, ssl.SSLError) as exc:
        raise SettingsError(f"MCPTASKS_WARM_TLS_CA_FILE ({kube.warm_tls_ca_file}): {exc}") from exc


def load_warm_call_signer(settings: Settings) -> WarmCallSigner:
    """The warm-call key (`MCPTASKS_WARM_CALL_KEY_FILE`, else `warm-call.key` in the data folder, created if absent).

    Raises:
        SettingsError: the file named cannot be read or holds no Ed25519 private key in PEM.
    """
    path = settings.serve.warm_call_key_file
    try:
        if path is None:
            pem = load_key(settings.serve.data_dir.resolve(), "warm-call.key", warm_auth.new_private_pem)
        else:
            pem = path.read_bytes()
        return WarmCallSigner.from_pem(pem)
    except (OSError, ValueError) as exc:
        where = path or settings.serve.data_dir / "warm-call.key"
        raise SettingsError(f"MCPTASKS_WARM_CALL_KEY_FILE ({where}): {exc}") from exc


def load_request_state_key(data_dir: Path) -> bytes:
    """The HMAC key for `requestState` (`request-state.key`), shared by restarts and sibling processes."""
    return load_key(data_dir, "request-state.key")


def build_app(settings: Settings) -> tuple[web.Application, LocalRunner]:
    """Create the embedded server's application and runner (nothing is opened until the app starts)."""
    observability.install("gateway", "runner")
    serve = settings.serve
    data_dir = private_folder(serve.data_dir.resolve())
    gateway_settings = replace(
        settings.gateway, server_version=__version__, request_state_secret=load_request_state_key(data_dir)
    )
    store = SqliteTaskStore(data_dir / "tasks.sqlite3", legacy_issuer=legacy_owner_issuer(settings))
    observability.record_writes(store)
    catalog = FileToolCatalog(serve.tools_dirs, settings.gateway.follow_tool_names())
    artifacts = artifact_store(settings, data_dir, settings.runner.artifact_max_bytes)
    runner = LocalRunner(
        store,
        catalog,
        artifacts,
        utc_now,
        settings.runner,
        state_dir=data_dir,
        worker_key=load_key(data_dir, "worker.key"),
        warm_call_signer=load_warm_call_signer(settings),
        limits=settings.limits,
    )
    services = Services(
        store=store,
        catalog=catalog,
        artifacts=artifacts,
        executor=runner,
        clock=utc_now,
        settings=gateway_settings,
        limits=settings.limits,
    )
    authenticator = authenticator_for(settings)

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        await store.open()
        await artifacts.open()
        await catalog.discover_servers()  # before the runner: a run adopted after a crash needs its tool
        await runner.start()
        resync = asyncio.create_task(catalog.resync_servers(), name="server-resync")
        try:
            yield
        finally:
            await aio.cancel_and_wait([resync])
            await runner.aclose()
            await artifacts.aclose()
            await store.aclose()

    return create_app(services, authenticator, lifecycle), runner


def authenticator_for(settings: Settings, service_accounts: TokenReviewer | None = None) -> Gate:
    """Every configured mechanism (OIDC issuers, ServiceAccount tokens, `--tokens`), else the local principal.

    Raises:
        SettingsError: the token file is malformed.
    """
    serve = settings.serve
    try:
        static: Authenticator | None = (
            TokenFileAuthenticator(serve.tokens_file) if serve.tokens_file is not None else None
        )
    except ValueError as exc:
        raise SettingsError(f"--tokens / MCPTASKS_TOKENS: {exc}") from exc
    return Gate(settings.auth, static, service_accounts, resource_name=settings.gateway.server_name, mcp_path=MCP_PATH)


def describe_auth(settings: Settings) -> str:
    """How the server authenticates, for its start-up banner."""
    ways = [f"bearer tokens from {settings.serve.tokens_file}"] if settings.serve.tokens_file else []
    ways += [f"OIDC tokens of {issuer}" for issuer in settings.auth.oidc_issuer]
    ways += ["Kubernetes ServiceAccount tokens"] if settings.auth.service_account_tokens else []
    return "; ".join(ways) or "no token file: one local principal, loopback only"


async def start_metrics(settings: Settings, host: str) -> web.AppRunner | None:
    """Serve `/metrics` on `host:metrics_port` unless the port is 0.

    The caller has chosen the families this process exports (`observability.install`).
    """
    if not settings.serve.metrics_port:
        return None
    runner, port = await start_metrics_server(host, settings.serve.metrics_port)
    print(f"Prometheus metrics on http://{host}:{port}/metrics", flush=True)
    return runner


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on `host:port` (port 0: one the kernel picks), bound before the app starts, so a
    taken port stops the process before it opens the store, discovers servers or starts a runner (a second
    server on the same data folder must not claim tasks it will not serve).

    Raises:
        OSError: the address cannot be resolved or bound (e.g. `EADDRINUSE`).
    """
    family, kind, proto, _name, address = socket.getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        if os.name == "posix":  # as asyncio's create_server: a restart may bind while old connections linger
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(socket.SOMAXCONN)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


async def run_until_signalled(app: web.Application, settings: Settings, where: str) -> None:
    """Serve `app` on `--host`/`--port` until SIGINT/SIGTERM; print where it listens and how it authenticates.

    `where` is a second banner line (data folder, cluster namespace, ...).
    """
    listening = listen(settings.serve.host, settings.serve.port)  # before anything opens the store or runs
    web_runner = gateway.create_runner(app, shutdown_timeout_s=5, lingering_time_s=LINGERING_TIME_S)
    try:
        await web_runner.setup()
    except BaseException:
        listening.close()
        raise
    site = web.SockSite(web_runner, listening)
    await site.start()
    host, port = web_runner.addresses[0][:2]
    auth = describe_auth(settings)
    print(f"mcp-tasks {__version__} serving MCP on http://{host}:{port}/mcp ({auth})", flush=True)
    print(where, flush=True)
    metrics_runner = await start_metrics(settings, settings.serve.host)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        print("shutting down", flush=True)
        await web_runner.cleanup()
        if metrics_runner is not None:
            await metrics_runner.cleanup()


async def serve(settings: Settings) -> None:
    """`mcptasks serve`: run the embedded server until SIGINT/SIGTERM."""
    app, _ = build_app(settings)
    where = f"data: {settings.serve.data_dir.resolve()}  tools: {', '.join(map(str, settings.serve.tools_dirs))}"
    await run_until_signalled(app, settings, where)
