"""The bridge's pure parts: its view of the server (the executor's JSON read back), the progress coalescing
that keeps a flood of notifications from queueing work, and the capability refusal a server gets."""

from __future__ import annotations

import json
import socket
import sys
import threading
from typing import Any

import anyio
import mcp_types as types
import pytest

from mcp_tasks.bridge import target as target_module
from mcp_tasks.bridge.mapping import Progress, ServerRequests
from mcp_tasks.bridge.target import BridgeConfigError, Target
from mcp_tasks.runtime import ClientLacksCapability, contract
from mcp_tasks.tasks.servers import bridge_target, parse_server_manifest


def test_the_bridge_reads_back_the_server_the_executor_describes() -> None:
    """Our own contract (`MCPTASKS_BRIDGE_SERVER`): what `bridge_target` writes, `Target` reads, paths resolved."""
    document = {
        "apiVersion": "mcptasks.io/v1alpha1",
        "kind": "McpServer",
        "metadata": {"name": "web"},
        "spec": {
            "transport": "streamable-http",
            "http": {"port": 8080, "path": "/rpc", "portEnv": "PORT"},
            "container": {"command": ["srv", "--http"], "workingDir": "data", "env": [{"name": "A", "value": "1"}]},
        },
    }
    server = parse_server_manifest(document, source="s.yaml", base_dir="/srv/tools")
    environ = {contract.ENV_BRIDGE_SERVER: json.dumps(bridge_target(server))}
    target = Target.from_environment(environ)
    assert target == Target(
        server="web",
        transport="streamable-http",
        command=("srv", "--http"),
        env={"A": "1"},
        working_dir="/srv/tools/data",
        port=8080,
        path="/rpc",
        port_env="PORT",
        url=None,
    )
    with pytest.raises(BridgeConfigError, match=contract.ENV_BRIDGE_SERVER):
        Target.from_environment({})
    with pytest.raises(BridgeConfigError, match="not valid"):
        Target.from_environment({contract.ENV_BRIDGE_SERVER: "{}"})


class SlowContext:
    """A `ToolContext` stand-in whose `progress` blocks until released, recording what it was given."""

    def __init__(self) -> None:
        self.posted: list[float] = []
        self.release = threading.Event()
        self.entered = threading.Event()

    def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        self.entered.set()
        self.release.wait(5)
        self.posted.append(progress)


async def test_a_flood_of_progress_notifications_costs_one_report_at_a_time_and_the_latest_wins() -> None:
    """Our own choice (issue: hostile servers): notifications only record the latest value; one worker-API
    call is in flight at a time, so 5000 notifications while it is slow post twice, ending with the last."""
    ctx = SlowContext()
    progress = Progress(ctx)  # type: ignore[arg-type]  # the stand-in has the one method used
    async with anyio.create_task_group() as group:
        group.start_soon(progress.run)
        await progress(1, 5000, None)
        await anyio.to_thread.run_sync(ctx.entered.wait, 5)
        for step in range(2, 5001):
            await progress(step, 5000, None)
        ctx.release.set()
        with anyio.fail_after(5):
            while len(ctx.posted) < 2:
                await anyio.sleep(0.01)  # the posts run in worker threads: nothing else to wait on
        group.cancel_scope.cancel()
    assert ctx.posted == [1, 5000]


class RefusingContext:
    def ask(self, requests: Any) -> Any:
        raise ClientLacksCapability("the client did not declare sampling", "sampling")


async def test_a_request_the_client_cannot_answer_gets_the_server_a_method_not_found_error() -> None:
    """Mapping row (capability rule): nothing is put; the server gets -32601 naming the method."""
    requests = ServerRequests(RefusingContext)  # type: ignore[arg-type]  # the stand-in has the one method used
    params = types.CreateMessageRequestParams(
        messages=[types.SamplingMessage(role="user", content=types.TextContent(type="text", text="hi"))],
        max_tokens=10,
    )
    answer = await requests.sampling(None, params)
    assert isinstance(answer, types.ErrorData)
    assert answer.code == types.METHOD_NOT_FOUND and "sampling/createMessage" in answer.message
    none = ServerRequests(lambda: "no call of this connection is waiting for input")
    assert isinstance(await none.list_roots(None), types.ErrorData)


async def test_a_fixed_port_that_is_taken_fails_the_start_instead_of_reaching_another_calls_server() -> None:
    """Embedded, a Streamable HTTP server without `http.portEnv` listens on its fixed `http.port`: when that
    port already answers (another call's server), the bridge must not connect there and call the tool on a
    server that is not its own; it refuses, saying to set `portEnv`."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        target = Target(server="fixed", transport="streamable-http", command=(sys.executable, "-c", "pass"), port=port)
        with pytest.raises(ConnectionError, match=r"set http\.portEnv"):
            async with target_module._http_server(target):
                pytest.fail("the bridge reached a server it did not start")
