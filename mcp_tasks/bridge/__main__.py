"""`python -m mcp_tasks.bridge [discover]`: the process an executor runs for an McpServer's tool.

Without an argument: one call (`oneshot`), or, with `MCPTASKS_SERVE_PORT` set (the tool is warm), the
warm worker loop over one server connection (`warm`), through `mcp_tasks.runtime.run`. With `discover`:
print the server's discovery JSON on stdout (`discovery`), or, with `MCPTASKS_WORKER_URL` set (a
Kubernetes discovery pod), post it as the structuredContent of a result to that worker API URL. Exit code 2:
the environment names no usable server.
"""

from __future__ import annotations

import json
import logging
import os
import sys

import anyio

from mcp_tasks import runtime
from mcp_tasks.bridge.call import leaf
from mcp_tasks.bridge.discovery import discover
from mcp_tasks.bridge.oneshot import run_once
from mcp_tasks.bridge.server_tasks import task_mode
from mcp_tasks.bridge.target import BridgeConfigError, Target
from mcp_tasks.bridge.warm import WarmBridge
from mcp_tasks.runtime import contract


def main(argv: list[str]) -> None:
    """Run the bridge (see the module docstring)."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="mcp-tasks bridge: %(message)s")
    # The SDK logs every unparsable stdout line with a traceback; `mapping.ServerMessages` reports them, bounded.
    logging.getLogger("mcp.client.stdio").setLevel(logging.CRITICAL)
    try:
        target = Target.from_environment(os.environ)
    except BridgeConfigError as exc:
        sys.stderr.write(f"mcp-tasks bridge: {exc}\n")
        sys.exit(2)
    if argv == ["discover"] and os.environ.get(contract.ENV_WORKER_URL):
        # Kubernetes: the discovery pod reports to the operator's worker API as a run reports its result
        # (`operator/server_discovery.py`), the discovery JSON as the result's structuredContent.
        runtime.run(lambda _ctx: {"content": [], "structuredContent": anyio.run(discover, target)})
    if argv == ["discover"]:
        try:
            found = anyio.run(discover, target)
        except Exception as exc:  # any failure of the server is reported in one line, the executor logs it
            reason = leaf(exc)
            sys.stderr.write(
                f"mcp-tasks bridge: discovery of {target.server!r} failed: {type(reason).__name__}: {reason}\n"
            )
            sys.exit(1)
        sys.stdout.write(json.dumps(found, separators=(",", ":")) + "\n")
        return
    tool = os.environ.get(contract.ENV_BRIDGE_TOOL) or ""
    if not tool:
        sys.stderr.write(f"mcp-tasks bridge: {contract.ENV_BRIDGE_TOOL} is not set\n")
        sys.exit(2)
    idempotent = os.environ.get(contract.ENV_BRIDGE_IDEMPOTENT) == "true"
    mode = task_mode(os.environ.get(contract.ENV_BRIDGE_TASK_SUPPORT))
    if os.environ.get(contract.ENV_SERVE_PORT):
        runtime.run(WarmBridge(target, tool, idempotent, mode).main)
    runtime.run(lambda ctx: run_once(ctx, target, tool, idempotent, mode))


main(sys.argv[1:])
