"""Discovery of an McpServer's tools, embedded: run the bridge's `discover` where calls run.

The embedded executor runs a server tool's calls as `python -m mcp_tasks.bridge` processes, so discovery
runs the same bridge, `discover` mode, as a child process with the same server environment
(`tasks/servers.py:bridge_target`), and reads the one JSON object it prints (`tasks/servers.py:Discovery`).
The gateway and the runner never speak MCP to the server themselves, and no one here imports the bridge.
Bounded: `spec.discoveryTimeoutSeconds`, and `MAX_OUTPUT_BYTES` of output.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from typing import Any, Final

from mcp_tasks.runtime import contract
from mcp_tasks.tasks.servers import BRIDGE_MODULE, Discovery, ServerSpec, bridge_target

MAX_OUTPUT_BYTES: Final = 16 * 1024 * 1024
"""Largest discovery answer read (every tool's schemas, as the server lists them), in bytes."""
STDERR_TAIL_BYTES: Final = 2000
"""How much of the bridge's stderr a failed discovery's message quotes, in bytes."""
_PASSTHROUGH_ENV: Final = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV")


class DiscoveryFailed(Exception):
    """The server could not be started, reached or listed; the message says why (with its stderr's tail)."""


async def discover(server: ServerSpec) -> Discovery:
    """Start `server` through the bridge, handshake in its era, list all its tools.

    Raises:
        DiscoveryFailed: the bridge exited with an error, printed no valid answer, or took longer than
            `spec.discoveryTimeoutSeconds`.
    """
    env = {key: os.environ[key] for key in _PASSTHROUGH_ENV if key in os.environ}
    env[contract.ENV_BRIDGE_SERVER] = json.dumps(bridge_target(server), separators=(",", ":"))
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        BRIDGE_MODULE,
        "discover",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=server.base_dir,
        start_new_session=True,
        limit=MAX_OUTPUT_BYTES,
    )
    timeout_s = server.manifest.discovery_timeout_seconds
    try:
        async with asyncio.timeout(timeout_s):
            stdout, stderr = await process.communicate()
    except TimeoutError:
        raise DiscoveryFailed(f"{server.source}: discovery took longer than {timeout_s:g} s") from None
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
    tail = stderr[-STDERR_TAIL_BYTES:].decode("utf-8", "replace").strip()
    if process.returncode != 0:
        raise DiscoveryFailed(f"{server.source}: discovery exited with code {process.returncode}: {tail}")
    if len(stdout) > MAX_OUTPUT_BYTES:
        raise DiscoveryFailed(f"{server.source}: the server's tool listing is over {MAX_OUTPUT_BYTES} bytes")
    try:
        found: Any = json.loads(stdout)
        return Discovery(
            protocol_version=str(found["protocolVersion"]),
            server_info=dict(found.get("serverInfo") or {}),
            tools=tuple(tool for tool in found["tools"] if isinstance(tool, dict)),
            capabilities=dict(found.get("capabilities") or {}),
            instructions=found.get("instructions"),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise DiscoveryFailed(f"{server.source}: discovery printed no valid answer ({exc}): {tail}") from exc
