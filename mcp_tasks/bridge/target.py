"""The bridge's server: how to start it and reach it, read from the environment the executor set.

The executor runs the bridge as the tool's process with `MCPTASKS_BRIDGE_SERVER` (the JSON
`tasks/servers.py:bridge_target` writes) and `MCPTASKS_BRIDGE_TOOL`. `connect` starts the server (a stdio
child, or a Streamable HTTP process on a free loopback port) and opens an official-SDK `mcp.Client` to it,
negotiating the server's era (`server/discover` for 2026-07-28, else `initialize`). The server gets only
its own spec's environment plus the SDK's short safe list (`PATH`, `HOME`, ...), never the bridge's
worker token. A server the bridge starts runs under the keeper (`bridge.keeper`), so it never outlives the
bridge. Nothing here knows of tasks.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.extension import ClientExtension
from mcp.client.session import ElicitationFnT, ListRootsFnT, LoggingFnT, MessageHandlerFnT, SamplingFnT
from mcp.client.stdio import get_default_environment

from mcp_tasks.runtime import contract

CLIENT_INFO: Final = types.Implementation(name="mcp-tasks-bridge", version="0.1.0")
HTTP_START_TIMEOUT_S: Final = 60.0
"""Longest wait for a Streamable HTTP server process to accept connections on its port, in seconds."""
STOP_GRACE_S: Final = 2.0
"""Time between SIGTERM and SIGKILL of a Streamable HTTP server process the bridge started, in seconds."""


class BridgeConfigError(Exception):
    """The bridge's environment does not name a usable server (a deployment error, not the server's)."""


@dataclass(frozen=True, slots=True)
class Target:
    """One MCP server as the bridge starts and reaches it.

    `command` is the server's argv (`None`: a running server at `url`); `env` the plain values of its spec;
    `port`/`path`/`port_env`/`url` apply to `streamable-http` only.
    """

    server: str
    transport: str
    command: tuple[str, ...] | None
    env: Mapping[str, str] = field(default_factory=dict)
    working_dir: str | None = None
    port: int = 3001
    path: str = "/mcp"
    port_env: str | None = None
    url: str | None = None

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> Target:
        """Read `contract.ENV_BRIDGE_SERVER`.

        Raises:
            BridgeConfigError: the variable is missing or not the expected JSON.
        """
        raw = environ.get(contract.ENV_BRIDGE_SERVER)
        if not raw:
            raise BridgeConfigError(
                f"{contract.ENV_BRIDGE_SERVER} is not set: the bridge runs as an McpServer tool's process"
            )
        try:
            data: Any = json.loads(raw)
            http = data.get("http") or {}
            command = data.get("command")
            return cls(
                server=str(data["server"]),
                transport=str(data["transport"]),
                command=tuple(str(part) for part in command) if command else None,
                env={str(k): str(v) for k, v in (data.get("env") or {}).items()},
                working_dir=data.get("workingDir"),
                port=int(http.get("port") or 3001),
                path=str(http.get("path") or "/mcp"),
                port_env=http.get("portEnv"),
                url=http.get("url"),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise BridgeConfigError(f"{contract.ENV_BRIDGE_SERVER} is not valid: {exc}") from exc


@dataclass(frozen=True, slots=True)
class Handlers:
    """The client callbacks of one connection (the mapping, `bridge.mapping`)."""

    sampling: SamplingFnT
    elicitation: ElicitationFnT
    list_roots: ListRootsFnT
    logging: LoggingFnT
    message: MessageHandlerFnT
    extensions: tuple[ClientExtension, ...] = ()
    """Client extensions of the connection (e.g. the binding of a server's `notifications/tasks/status`)."""


KEEPER_SCRIPT: Final = Path(__file__).with_name("keeper.py")
"""The keeper (`bridge.keeper`), run by path: it needs nothing but the standard library."""


def keeper_argv(command: Sequence[str], env: Mapping[str, str], working_dir: str | None) -> list[str]:
    """The argv that starts `command` under the keeper, so it never outlives this process (docs/mcp-servers.md
    §4); `command` itself on Windows, where the SDK's Job Object is all there is. The keeper runs isolated
    (`-I -S`: no `PYTHON*` variable of the server's `env` reaches it) and passes `env` on unchanged.

    Call it from the thread that starts the process and lives as long as the bridge (on Linux the keeper
    learns of the bridge's end from that thread's).

    Raises:
        FileNotFoundError: `command[0]` is not found on `env`'s `PATH` (or, with a `/`, from `working_dir`): the
            error starting it directly would raise.
    """
    program = command[0]
    if "/" in program:
        found: str | None = str(Path(working_dir or ".", program))
        if not os.access(str(found), os.X_OK):
            found = None
    else:
        found = shutil.which(program, path=env.get("PATH", os.defpath))
    if found is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
    if sys.platform == "win32":  # pragma: no cover
        return list(command)
    return [sys.executable, "-I", "-S", str(KEEPER_SCRIPT), str(os.getpid()), *command]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _claim_fixed_port(port: int) -> None:
    """Check that nothing listens on 127.0.0.1:`port` before a server is started there, so the bridge never
    reaches another call's server on that port (a fixed `http.port` takes one call at a time).

    Raises:
        ConnectionError: the port is taken, with what to set instead.
    """
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            raise ConnectionError(
                f"port {port} is taken (another call of this server, or another program): set http.portEnv in "
                "the McpServer so each call's server gets a free port, or make it warm"
            ) from exc


async def _accepting(port: int, process: anyio.abc.Process) -> None:
    """Return once 127.0.0.1:`port` accepts a connection.

    Raises:
        ConnectionError: the process exited first, or nothing listened within `HTTP_START_TIMEOUT_S`.
    """
    with anyio.move_on_after(HTTP_START_TIMEOUT_S):
        while process.returncode is None:
            try:
                stream = await anyio.connect_tcp("127.0.0.1", port)
            except OSError:
                await anyio.sleep(0.05)  # another process: nothing tells us it listens
                continue
            await stream.aclose()
            return
        raise ConnectionError(f"the MCP server exited with code {process.returncode} before listening on {port}")
    raise ConnectionError(f"the MCP server did not listen on port {port} within {HTTP_START_TIMEOUT_S:.0f} s")


@contextlib.asynccontextmanager
async def _http_server(target: Target) -> AsyncIterator[str]:
    """Start the Streamable HTTP server (its own session, so a stop reaches its children) and yield its URL."""
    if target.url is not None:
        yield target.url
        return
    assert target.command is not None  # the manifest requires a container without http.url
    if target.port_env:
        port = _free_port()
    else:
        port = target.port
        _claim_fixed_port(port)
    env = get_default_environment() | dict(target.env)
    if target.port_env:
        env[target.port_env] = str(port)
    process = await anyio.open_process(
        keeper_argv(target.command, env, target.working_dir),
        env=env,
        cwd=target.working_dir,
        stdin=subprocess.DEVNULL,
        stdout=sys.stderr.fileno(),
        stderr=sys.stderr.fileno(),
        start_new_session=True,
    )
    try:
        await _accepting(port, process)
        yield f"http://127.0.0.1:{port}{target.path}"
    finally:
        with anyio.CancelScope(shield=True):
            await _stop(process)


async def _stop(process: anyio.abc.Process) -> None:
    """SIGTERM the server's process group, SIGKILL it after `STOP_GRACE_S`."""
    if process.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGTERM)
    with anyio.move_on_after(STOP_GRACE_S):
        await process.wait()
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with anyio.move_on_after(STOP_GRACE_S):
        await process.wait()


@contextlib.asynccontextmanager
async def connect(target: Target, handlers: Handlers) -> AsyncIterator[Client]:
    """Start (or reach) the server and open a client to it, in its own era.

    Declares `sampling`, `elicitation` (form and URL) and `roots`: every kind the bridge can put to the
    calling client (some servers list tools only for clients that declare them). `mode="auto"` probes
    `server/discover` (2026-07-28) and falls back to `initialize` + `notifications/initialized`
    (2025-06-18, 2025-11-25). Leaving the block stops the server: a stdio one by closing its stdin, then
    SIGTERM and SIGKILL (the SDK's shutdown); an HTTP one by SIGTERM, then SIGKILL. A started server runs
    under the keeper (`keeper_argv`), which stops it if the bridge ends without leaving the block.

    Raises:
        OSError: the server's command cannot be started.
        ConnectionError: an HTTP server did not come up.
        mcp.shared.exceptions.MCPError: the handshake was refused.
    """
    async with contextlib.AsyncExitStack() as stack:
        server: StdioServerParameters | str
        if target.transport == "stdio":
            if not target.command:
                raise BridgeConfigError("a stdio server needs a command")
            env = get_default_environment() | dict(target.env)
            command, *args = keeper_argv(target.command, env, target.working_dir)
            server = StdioServerParameters(command=command, args=args, env=dict(target.env), cwd=target.working_dir)
        else:
            server = await stack.enter_async_context(_http_server(target))
        client = Client(
            server,
            mode="auto",
            cache=None,
            client_info=CLIENT_INFO,
            sampling_callback=handlers.sampling,
            elicitation_callback=handlers.elicitation,
            list_roots_callback=handlers.list_roots,
            logging_callback=handlers.logging,
            message_handler=handlers.message,
            extensions=list(handlers.extensions) or None,
        )
        yield await stack.enter_async_context(client)
