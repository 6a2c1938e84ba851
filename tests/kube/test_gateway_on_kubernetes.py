"""`mcptasks gateway` on a real kube-apiserver: tools from McpTools, tasks as McpTasks, every field kept."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from kubernetes_asyncio.client import ApiClient

from mcp_tasks.protocol.models import TaskStatus
from mcp_tasks.store.kubernetes import KubernetesTaskStore
from mcp_tasks.store.kubernetes.watch import UNREACHABLE_AFTER_S
from mcp_tasks.tasks import transitions
from mcp_tasks.tasks.interfaces import Writer, transact, utc_now
from mcp_tasks.tasks.limits import LimitSettings
from mcp_tasks.tasks.owner import Owner
from mcp_tasks.tasks.record import Lease, TaskRecord
from tests.clients import typescript
from tests.conftest import TASKS_CAPS
from tests.conftest import until as shared_until
from tests.controlplane.cluster import ControlPlane
from tests.e2e.test_legacy_clients import call_to_the_end, cancel_notification, initialize, legacy_post, open_call
from tests.kube.conftest import Gateways, Operators, client, get_object, sep_hello_world, until

NEW_TOOL = """\
apiVersion: mcptasks.io/v1alpha1
kind: McpTool
metadata: {name: added-later}
spec:
  name: added_later
  description: Applied while the gateway runs.
  inputSchema: {type: object}
  container: {image: example.org/added:1, command: [python, -c, "pass"]}
"""


async def test_tools_list_follows_kubectl_apply_and_delete(
    gateways: Gateways, http_session: aiohttp.ClientSession, control_plane: ControlPlane, namespace: str
) -> None:
    mcp = client(http_session, await gateways.start())

    async def names() -> list[str]:
        return [tool["name"] for tool in (await mcp.request("tools/list")).result["tools"]]

    listed = await names()
    assert listed == sorted(listed) and {"hello_world", "sleeper", "confirm_delete"} <= set(listed)
    control_plane.kubectl("apply", "-n", namespace, "-f", "-", input_text=NEW_TOOL)

    async def added() -> bool:
        return "added_later" in await names()

    async def removed() -> bool:
        return not await added()

    await until(added, timeout_s=10)
    control_plane.kubectl("delete", "-n", namespace, "mcptool", "added-later")
    await until(removed, timeout_s=10)
    table = control_plane.kubectl("get", "mcptools", "-n", namespace).splitlines()
    assert table[0].split() == ["NAME", "TOOL", "VALID", "IMAGE", "POLICY", "AGE"]
    assert any(
        line.split()[:4] == ["hello-world", "hello_world", "ghcr.io/mcp-tasks/examples:0.1.0", "optional"]
        for line in table
    )


async def test_the_crd_schema_rejects_a_tool_whose_input_schema_is_not_an_object(
    control_plane: ControlPlane, namespace: str
) -> None:
    broken = yaml.safe_load(NEW_TOOL)
    broken["spec"]["inputSchema"] = {"type": "string"}
    with pytest.raises(subprocess.CalledProcessError) as rejected:
        control_plane.kubectl("apply", "-n", namespace, "-f", "-", input_text=yaml.safe_dump(broken))
    assert "spec.inputSchema.type" in rejected.value.stderr and '"object"' in rejected.value.stderr


async def test_every_record_field_survives_the_api_server(api_client: ApiClient, namespace: str) -> None:
    """Structural-schema pruning silently drops undeclared fields: a fully populated record must come back whole."""
    store = KubernetesTaskStore(api_client, namespace)
    now = utc_now()
    began = now - timedelta(seconds=90)  # running for 90 s: the keep-alive raises ttlMs to 90 s + 60 s
    created = await store.create(
        TaskRecord(
            task_id="f" * 32,  # type: ignore[arg-type]
            owner=Owner("acme", "alice", "static"),
            tool="sleeper",
            arguments={"seconds": 1, "deep": {"list": [1, {"x": None}]}},
            status=TaskStatus.WORKING,
            created_at=began,
            last_updated_at=began,
            ttl_ms=60_000,
            poll_interval_ms=250,
            pre_input_responses={"before": {"action": "accept", "content": {"name": "x"}}},
            client_capabilities={"elicitation": {"form": {}, "url": {}}, "sampling": {"tools": {}}},
        )
    )
    ask = {"method": "elicitation/create", "params": {"message": "?", "requestedSchema": {"type": "object"}}}

    def everything(record: TaskRecord) -> tuple[TaskRecord, None]:
        record, _ = transitions.add_input_requests(record, [("q", ask), ("r", ask)], now)
        record = transitions.claim(record, "worker-1", now, timedelta(seconds=30), 120_000)
        return transitions.set_status_message(record, "asked twice", now), None

    written, _ = await transact(store, created.task_id, everything, Writer.EXECUTOR)
    answered, _ = await transact(
        store,
        created.task_id,
        lambda r: (transitions.answer_input_requests(r, {"q": {"action": "decline"}}, now), None),
        Writer.CLIENT,
    )
    cancelled, _ = await transact(
        store, created.task_id, lambda r: (transitions.request_cancel(r, "alice", now), None), Writer.CLIENT
    )
    reread = await KubernetesTaskStore(api_client, namespace).get(created.task_id)
    assert reread == cancelled
    assert reread.lease == Lease("worker-1", written.lease.expires_at if written.lease else now)
    assert reread.input_requests == {"r": ask} and reread.input_responses == {"q": {"action": "decline"}}
    assert reread.issued_input_keys == ("q", "r") and reread.attempt == 1 and reread.ttl_ms == 150_000
    assert reread.retention_ms == 60_000, "retention is the ttlMs asked at creation (120 s offered, 60 s kept)"
    assert reread.pre_input_responses == created.pre_input_responses and reread.cancel_requested_by == "alice"
    assert reread.client_capabilities == {"elicitation": {"form": {}, "url": {}}, "sampling": {"tools": {}}}
    assert answered.status is TaskStatus.INPUT_REQUIRED


async def test_a_synchronous_call_runs_as_a_hidden_task_the_executor_finishes(
    gateways: Gateways, http_session: aiohttp.ClientSession
) -> None:
    """With `--runner none` the operator runs everything; a synchronous call waits for its hidden McpTask."""
    gateway = await gateways.start()
    store = gateway.store
    result = {"content": [{"type": "text", "text": "slept"}], "isError": False}

    async def executor() -> None:  # stands in for the operator
        while True:
            for record in await store.list_runnable(utc_now(), 10):
                await transact(
                    store, record.task_id, lambda r: (transitions.complete(r, result, utc_now()), None), Writer.EXECUTOR
                )
            await store.wait_for_new_tasks(1.0)

    running = asyncio.create_task(executor())
    try:
        reply = await client(http_session, gateway).call_tool("sleeper", {"seconds": 1}, caps={})
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
    assert reply.result["content"] == result["content"] and reply.result["isError"] is False
    assert "taskId" not in reply.result


async def test_the_sep_hello_world_flow_with_the_sdk_client_and_a_local_runner(
    gateways: Gateways, control_plane: ControlPlane, namespace: str
) -> None:
    """SEP-2663 Example Message Flow on the Kubernetes store (`--runner local` runs the tool on this machine)."""
    gateway = await gateways.start(runner="local")
    task_id = await sep_hello_world(gateway.url)
    stored: Any = get_object(control_plane, namespace, task_id)
    assert stored["status"]["taskStatus"] == "completed"
    assert stored["spec"]["inputResponses"]["name"]["content"] == {"input": "Luca"}
    assert stored["status"]["issuedInputKeys"] == ["name"]


async def test_the_unfinished_task_quota_holds_on_the_kubernetes_store(
    gateways: Gateways, http_session: aiohttp.ClientSession, control_plane: ControlPlane, namespace: str
) -> None:
    """`MCPTASKS_MAX_UNFINISHED_PER_PRINCIPAL=2` on a gateway of the Kubernetes store (no executor: the tasks
    stay unfinished): the third task-augmented call is refused with 429 naming the limit, and no McpTask is
    created for it; a second replica, which saw the first two through its watch, refuses too."""
    limits = LimitSettings(max_unfinished_per_principal=2)
    first = await gateways.start(limits=limits)
    mcp = client(http_session, first)
    created = {await mcp.start_task("sleeper", {"seconds": 60}) for _ in range(2)}
    refused = await mcp.call_tool("sleeper", {"seconds": 60}, caps=TASKS_CAPS)
    assert refused.status == 429, refused.body
    assert refused.error["data"]["limit"] == "max_unfinished_per_principal"
    assert task_names(control_plane, namespace) == created
    second = await gateways.start(limits=limits)
    again = await client(http_session, second).call_tool("sleeper", {"seconds": 60}, caps=TASKS_CAPS)
    assert again.status == 429 and task_names(control_plane, namespace) == created


async def test_a_finished_task_is_deleted_from_the_cluster_after_its_ttl(
    gateways: Gateways, http_session: aiohttp.ClientSession, control_plane: ControlPlane, namespace: str
) -> None:
    mcp = client(http_session, await gateways.start(runner="local"))
    task_id = await mcp.start_task("short_ttl", {"seconds": 0})
    await mcp.wait_status(task_id, "completed")
    assert get_object(control_plane, namespace, task_id) is not None
    await until(lambda: get_object(control_plane, namespace, task_id) is None, timeout_s=10)
    assert (await mcp.get(task_id)).error["code"] == -32602


async def test_a_legacy_client_call_is_answered_through_the_other_replica(
    gateways: Gateways, http_session: aiohttp.ClientSession, control_plane: ControlPlane, namespace: str
) -> None:
    """A 2025-11-25 `tools/call` streams from replica A; the client's answer to its `elicitation/create`
    goes to replica B (no sticky routing, no session) and reaches the McpTask through the API server."""
    first = await gateways.start(runner="local")
    second = await gateways.start()
    response, queue, pump = await open_call(http_session, first.url, 3, "hello_world", {})
    try:
        ask = await asyncio.wait_for(queue.get(), 60)
        assert ask["method"] == "elicitation/create"
        answer = {"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "accept", "content": {"name": "Kube"}}}
        status, _, _ = await legacy_post(http_session, second.url, answer)
        assert status == 202
        final = await asyncio.wait_for(queue.get(), 60)
        assert final["id"] == 3 and final["result"]["content"][0]["text"] == "Hello, Kube!"
    finally:
        pump.cancel()
        response.close()
    task_id = ask["id"].split(".")[1]
    stored: Any = get_object(control_plane, namespace, task_id)
    assert stored["status"]["taskStatus"] == "completed"
    assert stored["spec"]["inputResponses"]["name"]["content"] == {"name": "Kube"}


async def test_the_typescript_client_in_its_default_mode_on_the_kubernetes_store(gateways: Gateways) -> None:
    """The official TypeScript client, legacy by default, over McpTasks: elicitation, progress, cancel."""
    gateway = await gateways.start(runner="local")
    seen = await typescript.run(gateway.url, "legacy")
    assert seen["protocolVersion"] == "2025-11-25"
    assert seen["hello"] == {"text": "Hello, Grace!", "isError": False}
    assert seen["sleeper"]["text"].startswith("slept 1.5s") and seen["progress"], seen
    assert "error" in seen["cancelled"] and seen["cancelledAfterMs"] < 10_000, seen


async def test_input_rounds_of_a_plain_call_continue_on_the_other_replica(
    gateways: Gateways, http_session: aiohttp.ClientSession, control_plane: ControlPlane, namespace: str
) -> None:
    """SEP-2322 on an ordinary call: replica A answers `InputRequiredResult`; the retry with the answer
    goes to replica B, which writes it to the run's McpTask, and the same run greets."""
    first = client(http_session, await gateways.start(runner="local"))
    second = client(http_session, await gateways.start())
    caps: dict[str, Any] = {"elicitation": {}}
    asked = (await first.call_tool("hello_world", {}, caps=caps)).result
    assert asked["resultType"] == "input_required" and list(asked["inputRequests"]) == ["name"]
    answer = {"inputResponses": {"name": {"action": "accept", "content": {"name": "Luca"}}}}
    done = (
        await second.call_tool("hello_world", {}, caps=caps, extra={**answer, "requestState": asked["requestState"]})
    ).result
    assert done["resultType"] == "complete" and done["content"][0]["text"] == "Hello, Luca!"
    (stored,) = yaml.safe_load(control_plane.kubectl("get", "mcptasks", "-n", namespace, "-o", "yaml"))["items"]
    assert stored["status"]["taskStatus"] == "completed"
    assert stored["spec"]["inputResponses"]["name"]["content"] == {"name": "Luca"}


JOB_WAIT_S = 60.0
"""Bound on a Job-run call on the process node (a pod is a local process; Python starts in ~1 s)."""


def task_names(plane: ControlPlane, namespace: str) -> set[str]:
    listed = yaml.safe_load(plane.kubectl("get", "mcptasks", "-n", namespace, "-o", "yaml"))
    return {str(item["metadata"]["name"]) for item in listed["items"]}


async def new_task_name(plane: ControlPlane, namespace: str, store: KubernetesTaskStore, known: set[str]) -> str:
    """The one McpTask not in `known`, once the gateway's watch has seen it created (bounded wait)."""
    async with asyncio.timeout(30):
        while not (fresh := task_names(plane, namespace) - known):
            await store.wait_for_new_tasks(1.0)
    (name,) = fresh
    return name


async def test_a_legacy_call_repeating_the_id_of_an_expired_call_still_runs_on_the_operator(
    gateways: Gateways,
    operators: Operators,
    http_session: aiohttp.ClientSession,
    control_plane: ControlPlane,
    namespace: str,
) -> None:
    """Each Inspector CLI or langchain-mcp-adapters call opens a connection and calls with id 1. The
    operator remembers the names of deleted McpTasks and never runs one again, so a legacy call's hidden
    task must never take an expired call's name (our rule): in a session its id is scoped by the
    session's nonce; without a session header it is random. Each call below runs as a Job."""
    operators.start()
    gateway = await gateways.start()
    earlier: set[str] = set()
    for with_session in (True, True, False):
        headers = await initialize(http_session, gateway.url) if with_session else {}
        async with asyncio.timeout(JOB_WAIT_S):
            final = await call_to_the_end(http_session, gateway.url, 1, "sleeper", {"seconds": 0}, headers)
        assert final["id"] == 1 and final["result"]["content"][0]["text"].startswith("slept"), final
        (name,) = task_names(control_plane, namespace)
        assert name not in earlier
        earlier.add(name)
        control_plane.kubectl("delete", "mcptask", name, "-n", namespace, "--wait=true")  # as its expiry does
        assert get_object(control_plane, namespace, name) is None


async def test_a_legacy_cancel_with_a_repeated_id_stops_its_sessions_call_through_another_replica(
    gateways: Gateways,
    operators: Operators,
    http_session: aiohttp.ClientSession,
    control_plane: ControlPlane,
    namespace: str,
) -> None:
    """2025-11-25 `utilities/cancellation`, as the TypeScript SDK and mcp-remote send it (stream kept
    open): with a finished call and another session's open call under the same JSON-RPC id, the cancel,
    POSTed to another replica, stops the open call of the session that sent it and nothing else."""
    operators.start()
    first, second = await gateways.start(), await gateways.start()
    done = await initialize(http_session, first.url)
    async with asyncio.timeout(JOB_WAIT_S):
        await call_to_the_end(http_session, first.url, 1, "sleeper", {"seconds": 0}, done)
    known = task_names(control_plane, namespace)
    mine, other = await initialize(http_session, first.url), await initialize(http_session, second.url)
    opened = [await open_call(http_session, first.url, 1, "sleeper", {"seconds": 120}, mine)]
    try:
        my_task = await new_task_name(control_plane, namespace, first.store, known)
        opened.append(await open_call(http_session, first.url, 1, "sleeper", {"seconds": 120}, other))
        other_task = await new_task_name(control_plane, namespace, first.store, known | {my_task})
        await cancel_notification(http_session, second.url, 1, mine)
        _, queue, pump = opened[0]
        await asyncio.wait_for(pump, JOB_WAIT_S)  # the operator stopped the Job: the call's stream ended
        assert queue.empty(), "no response to a cancelled request"
        assert (await second.store.get(my_task, fresh=True)).status is TaskStatus.CANCELLED
        running = await second.store.get(other_task, fresh=True)
        assert running.cancel_requested_at is None and running.status is TaskStatus.WORKING, running
    finally:
        for response, _, pump in opened:
            pump.cancel()
            response.close()


class ApiRelay:
    """A TCP relay on 127.0.0.1 to the test API server that the test can take away (`cut`: connections
    closed, new ones refused, as when the API server is down) and bring back on the same port (`restore`)."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[Any]] = set()
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def cut(self) -> None:
        """Refuse new connections and close every open one; return when their relays ended (5 s bound)."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.close()
        async with asyncio.timeout(5):
            while self._handlers:
                await asyncio.wait(set(self._handlers))

    async def restore(self) -> None:
        await self.start()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        current = asyncio.current_task()
        assert current is not None
        self._handlers.add(current)
        self._writers.add(writer)
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.close()
            self._writers.discard(writer)
            self._handlers.discard(current)
            return
        self._writers.add(upstream_writer)
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self._pipe(reader, upstream_writer), name="relay-up")
                group.create_task(self._pipe(upstream_reader, writer), name="relay-down")
        finally:
            self._writers.difference_update({writer, upstream_writer})
            self._handlers.discard(current)

    @staticmethod
    async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()
        except OSError:
            pass
        finally:
            sink.close()


@pytest.fixture
async def api_relay(control_plane: ControlPlane) -> AsyncIterator[ApiRelay]:
    """A relay to the API server, requested before `gateways` so it outlives the gateways' shutdown."""
    relay = ApiRelay(control_plane.address, control_plane.api_port)
    await relay.start()
    try:
        yield relay
    finally:
        with contextlib.suppress(TimeoutError):
            await relay.cut()


def kubeconfig_through(plane: ControlPlane, relay: ApiRelay, folder: Path) -> Path:
    """The admin kubeconfig with its server replaced by the relay (same address, so the certificate fits)."""
    config = yaml.safe_load(plane.kubeconfig.read_text())
    for cluster in config["clusters"]:
        cluster["cluster"]["server"] = f"https://127.0.0.1:{relay.port}"
    path = folder / "relayed.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


async def test_a_gateway_that_loses_the_api_server_is_unready_but_alive_until_it_watches_again(
    control_plane: ControlPlane,
    api_relay: ApiRelay,
    gateways: Gateways,
    http_session: aiohttp.ClientSession,
    tmp_path: Path,
) -> None:
    """Our choice (docs/kubernetes.md §1, the gateway's probes): while the API server is unreachable for
    longer than `UNREACHABLE_AFTER_S`, `/readyz` answers 503 with a reason (the kubelet takes the replica
    out of its Service: its caches may be stale) and `/healthz` stays 200 (no restart); once it lists and
    watches again it is ready."""
    assert control_plane.address == "127.0.0.1"
    gateway = await gateways.start(kubeconfig=kubeconfig_through(control_plane, api_relay, tmp_path))
    base = gateway.url.removesuffix("/mcp")

    async def probe(path: str) -> tuple[int, dict[str, Any]]:
        async with http_session.get(f"{base}{path}") as response:
            return response.status, await response.json()

    assert await probe("/readyz") == (200, {"status": "ready"})
    # The clock starts before the cut: the gateway sees its connections end while `cut` still waits for the
    # relay's handlers. The gateway counts from its last open WATCH, which may be a moment earlier still
    # (right after start, its first WATCHes open just after the LIST that made it ready): hence the slack,
    # far below the bound, so an answer at once still fails.
    cut_at = asyncio.get_running_loop().time()
    await api_relay.cut()

    async def unready() -> dict[str, Any] | None:
        status, body = await probe("/readyz")
        return body if status == 503 else None

    body = await shared_until(unready, timeout_s=UNREACHABLE_AFTER_S + 30, interval_s=0.2)
    unready_after_s = asyncio.get_running_loop().time() - cut_at
    slack_s = 1.0
    assert unready_after_s >= UNREACHABLE_AFTER_S - slack_s, f"unready {unready_after_s:.2f} s after the cut: too soon"
    assert body["status"] == "not ready" and "API server unreachable" in body["reason"], body
    assert await probe("/healthz") == (200, {"status": "ok"})

    await api_relay.restore()

    async def ready() -> bool:
        return (await probe("/readyz"))[0] == 200

    await until(ready, timeout_s=30)
