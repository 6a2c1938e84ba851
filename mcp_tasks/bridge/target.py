"""The bridge's server: how to start it and reach it, read from the environment the executor set.

The executor runs the bridge as the tool's process with `MCPTASKS_BRIDGE_SERVER` (the JSON
`tasks/servers.py:bridge_target` writes) and `MCPTASKS_BRIDGE_TOOL`. `connect` starts the server (a stdio
child, or a Streamable HTTP process on a free loopback port) and opens an official-SDK `mcp.Client` to it,
negotiating the server's era (`server/discover` for 2026-07-28, else `initialize`). The server gets only
its own spec's environment plus the SDK's short safe list (`PATH`, `HOME`, ...), never the bridge's
worker token. Nothing here knows of tasks.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
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
        list(target.command),
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
    SIGTERM and SIGKILL (the SDK's shutdown); an HTTP one by SIGTERM, then SIGKILL.

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
            server = StdioServerParameters(
                command=target.command[0], args=list(target.command[1:]), env=dict(target.env), cwd=target.working_dir
            )
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
