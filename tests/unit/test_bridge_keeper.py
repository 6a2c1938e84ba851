"""The bridge's keeper (`bridge.keeper`, docs/mcp-servers.md §4) with real processes: a server the bridge starts
never outlives it, even one that ignores its closed stdin and SIGTERM and left a child of its own; the keeper
is otherwise the server, as its client sees it (exit code, death by signal, a missing command)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from mcp_tasks.bridge.target import keeper_argv
from tests.conftest import exited

STUBBORN_SERVER = textwrap.dedent(
    """
    import os, signal, subprocess, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # inherited by its child: neither stops on SIGTERM
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print(os.getpid(), child.pid, flush=True)
    time.sleep(600)  # and never reads its stdin, so its closing changes nothing
    """
)

BRIDGE = textwrap.dedent(
    """
    import os, subprocess, sys, time
    from mcp_tasks.bridge.target import keeper_argv
    command = [sys.executable, "-c", sys.argv[1]]
    subprocess.Popen(keeper_argv(command, os.environ, None), stdin=subprocess.PIPE, start_new_session=True)
    time.sleep(600)
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the guarantee is Linux's (PR_SET_PDEATHSIG)")
async def test_a_sigkill_of_the_bridge_stops_a_server_that_ignores_sigterm_and_its_child() -> None:
    """Ours (docs/mcp-servers.md §4), after the MCP lifecycle's shutdown (2025-11-25 basic/lifecycle#shutdown):
    once the bridge is gone the keeper waits, SIGTERMs the server's group, waits, and SIGKILLs the group."""
    bridge = subprocess.Popen([sys.executable, "-c", BRIDGE, STUBBORN_SERVER], stdout=subprocess.PIPE)
    try:
        assert bridge.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(bridge.stdout.readline), timeout=15)
        server, child = (int(pid) for pid in line.split())
        os.kill(bridge.pid, signal.SIGKILL)
        bridge.wait()
        await exited(server, timeout_s=15)
        await exited(child, timeout_s=15)
    finally:
        bridge.kill()
        bridge.wait()
        if bridge.stdout is not None:
            bridge.stdout.close()


def test_the_keeper_exits_as_its_server_did() -> None:
    """Ours: the client sees the server's exit code, or its death by a signal, as the keeper's."""
    code = [sys.executable, "-c", "raise SystemExit(3)"]
    assert subprocess.run(keeper_argv(code, os.environ, None), check=False).returncode == 3
    killed = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"]
    assert subprocess.run(keeper_argv(killed, os.environ, None), check=False).returncode == -signal.SIGTERM


def test_a_missing_command_fails_as_starting_it_directly_would() -> None:
    """Ours: `FileNotFoundError` before any process starts, as the SDK's spawn of the bare command raised."""
    with pytest.raises(FileNotFoundError):
        keeper_argv(["no-such-mcp-server"], {"PATH": "/nonexistent"}, None)
    with pytest.raises(FileNotFoundError):
        keeper_argv(["./no-such-mcp-server"], {}, "/")
