"""The Kubernetes task store on a real kube-apiserver: consistency, CAS, fidelity, isolation, watches, TTL."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio.client import ApiClient

from mcp_tasks.protocol.models import TaskStatus
from mcp_tasks.store.kubernetes import KubernetesTaskStore
from mcp_tasks.store.kubernetes.resources import GROUP, TASK_PLURAL, VERSION
from mcp_tasks.tasks import transitions
from mcp_tasks.tasks.errors import TaskNotFound
from mcp_tasks.tasks.ids import mint_task_id
from mcp_tasks.tasks.interfaces import TaskStore, Writer, transact, utc_now
from mcp_tasks.tasks.owner import Owner
from mcp_tasks.tasks.record import TaskRecord
from tests.controlplane.cluster import ControlPlane
from tests.kube.conftest import Gateways, client, get_object, until

ELICIT: dict[str, Any] = {"method": "elicitation/create", "params": {"message": "Sure?", "requestedSchema": {}}}


async def ask(store: TaskStore, task_id: str, keys: list[str]) -> TaskRecord:
    """Act as the executor: issue input requests (status subresource) and park the task in input_required."""
    record, minted = await transact(
        store,
        task_id,
        lambda r: transitions.add_input_requests(r, [(k, ELICIT) for k in keys], utc_now()),
        Writer.EXECUTOR,
    )
    assert minted == keys
    return record


async def test_a_task_created_through_one_replica_is_readable_through_another_at_once(
    gateways: Gateways, http_session: aiohttp.ClientSession, control_plane: ControlPlane, namespace: str
) -> None:
    """Create returns after the API server's 201, and a cache miss falls back to a GET: no replica says 'not found'."""
    a, b = client(http_session, await gateways.start()), client(http_session, await gateways.start())
    task_ids = []
    for _ in range(20):
        task_id = await a.start_task("sleeper", {"seconds": 30})
        reply = await b.get(task_id)
        assert reply.result["taskId"] == task_id, reply.body
        assert reply.result["status"] == "working"
        task_ids.append(task_id)
    table = control_plane.kubectl("get", "mcptasks", "-n", namespace).splitlines()
    assert table[0].split() == ["NAME", "STATUS", "TOOL", "TENANT", "TOOLERROR", "MESSAGE", "AGE"]
    rows = {line.split()[0]: line.split() for line in table[1:]}
    assert set(task_ids) <= set(rows)
    assert rows[task_ids[0]][1:4] == ["working", "sleeper", "local"]


async def test_concurrent_updates_and_cancels_through_two_replicas_lose_nothing(
    gateways: Gateways, http_session: aiohttp.ClientSession, control_plane: ControlPlane, namespace: str
) -> None:
    """Every write is CAS on resourceVersion; conflicts are retried, so every answer and the cancel land."""
    first, second = await gateways.start(), await gateways.start()
    a, b = client(http_session, first), client(http_session, second)
    task_id = await a.start_task("sleeper", {"seconds": 30})
    keys = [f"q{i}" for i in range(8)]
    await ask(first.store, task_id, keys)
    await b.wait_status(task_id, "input_required")

    answer = {"action": "accept", "content": {"ok": True}}
    calls = [(a if i % 2 else b).update(task_id, {key: answer}) for i, key in enumerate(keys)]
    calls += [a.cancel(task_id), b.cancel(task_id)]
    replies = await asyncio.gather(*calls)
    assert all(r.status == 200 and "result" in r.body for r in replies), [r.body for r in replies]
    print(f"compare-and-swap conflicts retried: {first.store.conflicts + second.store.conflicts}")

    stored = get_object(control_plane, namespace, task_id)
    assert stored is not None
    assert sorted(stored["spec"]["inputResponses"]) == keys
    assert stored["spec"]["cancelRequested"] is True
    assert set(stored["status"]["inputRequests"]) == set(keys), "answered, not yet consumed by the executor"
    task = (await a.get(task_id)).result
    assert task["status"] == "working" and "inputRequests" not in task


async def test_arguments_and_results_round_trip_exactly(
    gateways: Gateways, http_session: aiohttp.ClientSession, api_client: ApiClient, namespace: str
) -> None:
    """Nested objects, arrays, nulls, unicode and 64-bit integers survive etcd unchanged, in both directions."""
    payload: dict[str, Any] = {
        "nested": {"a": {"b": {"c": [[[]], {}, [1, None, "x"]]}}},
        "null": None,
        "int64_max": 2**63 - 1,
        "int64_min": -(2**63),
        "beyond_js": 2**53 + 1,
        "float": 0.1,
        "unicode": "é\u0000😀\u202e",
        "empty": {"o": {}, "a": []},
    }
    gateway = await gateways.start()
    mcp = client(http_session, gateway)
    task_id = await mcp.start_task("sleeper", {"seconds": 30, **payload})

    fresh = KubernetesTaskStore(api_client, namespace)  # no cache yet: an authoritative GET
    record = await fresh.get(task_id)
    assert json.dumps(record.arguments, sort_keys=True) == json.dumps({"seconds": 30, **payload}, sort_keys=True)

    result = {"content": [{"type": "text", "text": "done"}], "structuredContent": payload, "isError": False}
    await transact(fresh, task_id, lambda r: (transitions.complete(r, result, utc_now()), None), Writer.EXECUTOR)
    task = await mcp.wait_status(task_id, "completed")
    assert json.dumps(task["result"]["structuredContent"], sort_keys=True) == json.dumps(payload, sort_keys=True)
    assert type(task["result"]["structuredContent"]["int64_max"]) is int

    too_big = await mcp.call_tool("sleeper", {"seconds": 1, "id": 2**64})
    assert too_big.error["code"] == -32602
    assert "arguments/id" in too_big.error["message"] and "64-bit" in too_big.error["message"]


TOKENS = """\
tokens:
  - {token: alice-token, tenant: acme, subject: alice}
  - {token: bob-token, tenant: acme, subject: bob}
  - {token: eve-token, tenant: "evil corp/unit 7", subject: alice}
"""


async def test_another_tenant_sees_a_task_exactly_like_an_unknown_id(
    gateways: Gateways, http_session: aiohttp.ClientSession, control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(TOKENS)
    first, second = await gateways.start(tokens_file=tokens), await gateways.start(tokens_file=tokens)
    alice = client(http_session, first, "alice-token")
    task_id = await alice.start_task("sleeper", {"seconds": 30})
    await ask(first.store, task_id, ["confirm"])
    await alice.wait_status(task_id, "input_required")
    eve_task = await client(http_session, first, "eve-token").start_task("sleeper", {"seconds": 30})
    for gateway in (first, second):
        for intruder in ("bob-token", "eve-token"):
            other = client(http_session, gateway, intruder)
            unknown = [await other.get("0" * 32), await other.update("0" * 32, {}), await other.cancel("0" * 32)]
            foreign = [
                await other.get(task_id),
                await other.update(task_id, {"confirm": {"action": "accept", "content": {}}}),
                await other.cancel(task_id),
            ]
            assert [r.status for r in foreign] == [r.status for r in unknown]
            assert [r.error for r in foreign] == [r.error for r in unknown]
    still = (await alice.get(task_id)).result
    assert still["status"] == "input_required" and "confirm" in still["inputRequests"]
    labels = control_plane.kubectl("get", "mcptasks", "-n", namespace, "-L", "mcptasks.io/tenant", "--no-headers")
    tenant_of = {line.split()[0]: line.split()[-1] for line in labels.splitlines()}
    assert tenant_of[task_id] == "acme"
    assert tenant_of[eve_task].startswith("sha256-"), "a tenant that is not a valid label value is hashed"


async def test_a_watch_closed_by_the_server_resumes_without_losing_an_update(
    api_client: ApiClient, namespace: str
) -> None:
    """The API server ends each WATCH after timeoutSeconds (1 s here); the reflector resumes where it was."""
    watcher = KubernetesTaskStore(api_client, namespace, watch_timeout_s=1)
    writer = KubernetesTaskStore(api_client, namespace)
    await watcher.open()
    try:
        record = await writer.create(_new_record())
        steps = 12
        for step in range(steps):
            message = f"step {step}"

            def progress(r: TaskRecord, message: str = message) -> tuple[TaskRecord, None]:
                return transitions.set_status_message(r, message, utc_now()), None

            await transact(writer, record.task_id, progress, Writer.EXECUTOR)
            if step % 4 == 1:  # let the WATCH end and resume between two writes, three times over
                resumed = watcher.reflector.watches_started
                await until(lambda resumed=resumed: watcher.reflector.watches_started > resumed, timeout_s=10)
        async with asyncio.timeout(10):
            while (await watcher.get(record.task_id)).status_message != f"step {steps - 1}":
                await watcher.wait_for_change(1.0, record.task_id)
        assert watcher.reflector.watches_started >= 3, "the server closed the watch and it was resumed"
        assert watcher.reflector.relists == 0, "resumed from its resourceVersion, not by listing again"
    finally:
        await watcher.aclose()


async def test_the_watch_lists_in_pages_and_forgets_what_a_later_listing_lacks(
    api_client: ApiClient, namespace: str
) -> None:
    """A LIST in pages of 3 caches all 7 tasks; a relist after one was deleted no longer holds it."""
    writer = KubernetesTaskStore(api_client, namespace)
    records = [await writer.create(_new_record()) for _ in range(7)]
    watcher = KubernetesTaskStore(api_client, namespace, list_page_size=3)
    await watcher.open()
    try:
        assert watcher.cached_count() == 7
        await watcher.aclose()  # no watch: the deletion is seen only by the next listing
        await writer._delete_expired(records[0].task_id, (await writer.get(records[0].task_id, fresh=True)).version)
        await watcher.reflector._list()
        assert watcher.cached_count() == 6 and records[0].task_id not in watcher.unfinished_ids()
    finally:
        await watcher.aclose()


async def test_a_watch_too_old_to_resume_lists_again(api_client: ApiClient, namespace: str) -> None:
    """410 Gone: the reflector lists again and still sees every task."""
    watcher = KubernetesTaskStore(api_client, namespace, watch_timeout_s=1)
    writer = KubernetesTaskStore(api_client, namespace)
    await watcher.open()
    try:
        watcher.reflector.resume_from("1")  # far older than the API server's watch cache holds
        await until(lambda: watcher.reflector.relists > 0, timeout_s=10)
        record = await writer.create(_new_record())
        async with asyncio.timeout(10):
            while watcher.cached_count() == 0:
                await watcher.wait_for_change(0.5)
        assert (await watcher.get(record.task_id)).task_id == record.task_id
    finally:
        await watcher.aclose()


async def test_expired_tasks_are_deleted_from_the_cluster(
    api_client: ApiClient, control_plane: ControlPlane, namespace: str
) -> None:
    store = KubernetesTaskStore(api_client, namespace)
    await store.open()
    try:
        record = await store.create(_new_record(ttl_ms=1000))
        running = await store.create(_new_record(ttl_ms=1000))
        finished, _ = await transact(
            store, record.task_id, lambda r: (transitions.cancel(r, utc_now()), None), Writer.EXECUTOR
        )
        later = utc_now() + timedelta(seconds=2)
        assert await store.delete_expired(later, 10) == [record.task_id], "running tasks never expire"
        assert get_object(control_plane, namespace, record.task_id) is None
        assert get_object(control_plane, namespace, running.task_id) is not None
        try:
            await store.get(finished.task_id)
        except TaskNotFound:
            pass
        else:
            raise AssertionError("a deleted task must read as not found")
    finally:
        await store.aclose()


def _new_record(ttl_ms: int = 60_000) -> TaskRecord:
    now = utc_now()
    return TaskRecord(
        task_id=mint_task_id(),
        owner=Owner("acme", "alice", "static"),
        tool="sleeper",
        arguments={"seconds": 1},
        status=TaskStatus.WORKING,
        created_at=now,
        last_updated_at=now,
        ttl_ms=ttl_ms,
        poll_interval_ms=100,
    )


async def test_more_expired_tasks_than_one_old_sweep_took_are_deleted_at_once(
    api_client: ApiClient, control_plane: ControlPlane, namespace: str
) -> None:
    """Expiry deletes concurrently and without the old 100-per-sweep cap, so it keeps up with creation."""
    store = KubernetesTaskStore(api_client, namespace)
    await store.open()
    try:
        records = await asyncio.gather(*(store.create(_new_record(ttl_ms=1000)) for _ in range(150)))
        await asyncio.gather(
            *(
                transact(store, r.task_id, lambda r: (transitions.cancel(r, utc_now()), None), Writer.EXECUTOR)
                for r in records
            )
        )
        deleted = await store.delete_expired(utc_now() + timedelta(seconds=2), 1000)
        assert sorted(deleted) == sorted(r.task_id for r in records)
        listed = control_plane.kubectl("get", "mcptasks", "-n", namespace, "-o", "name").split()
        assert listed == []
    finally:
        await store.aclose()


async def test_finished_tasks_beyond_the_recent_ones_are_cached_as_summaries_and_read_whole_on_demand(
    api_client: ApiClient, control_plane: ControlPlane, namespace: str
) -> None:
    """The cache keeps no managedFields and only summaries of older finished tasks; a full read still
    returns the result (one GET), a summary read needs none, and writes still land on the real server."""
    store = KubernetesTaskStore(api_client, namespace, full_objects=2)
    await store.open()
    gets = 0
    original = store._api.get_namespaced_custom_object

    async def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal gets
        gets += 1
        return await original(*args, **kwargs)

    store._api.get_namespaced_custom_object = counted  # type: ignore[method-assign]  # counts API reads
    try:
        records = [await store.create(_new_record()) for _ in range(4)]
        for number, record in enumerate(records):
            result: dict[str, Any] = {"content": [{"type": "text", "text": f"result {number}"}], "isError": False}
            await store.compare_and_swap(
                transitions.complete(await store.get(record.task_id), result, utc_now()), Writer.EXECUTOR
            )
        assert all("managedFields" not in (entry.view()["metadata"]) for entry in store._cache.values())
        oldest, newest = records[0].task_id, records[-1].task_id
        assert store._cache[oldest].obj is None and store._cache[newest].obj is not None

        gets = 0
        summary = await store.get(oldest, summary=True)
        assert summary.status is TaskStatus.COMPLETED and summary.result is None and gets == 0
        whole = await store.get(oldest)
        assert whole.result is not None and whole.result["content"][0]["text"] == "result 0" and gets == 1
        again = await store.get(oldest)
        assert again.result == whole.result and gets == 1, "a read finished task is kept whole while recent"
        recent = await store.get(newest)
        assert recent.result is not None and recent.result["content"][0]["text"] == "result 3" and gets == 1

        with_spec = await store.create(_new_record())
        await transact(
            store, with_spec.task_id, lambda r: (transitions.request_cancel(r, "alice", utc_now()), None), Writer.CLIENT
        )
        stored = await original(GROUP, VERSION, namespace, TASK_PLURAL, with_spec.task_id)
        assert stored["spec"]["cancelRequested"] is True
    finally:
        await store.aclose()


async def test_each_write_is_told_to_the_observers_of_the_store_that_made_it(
    api_client: ApiClient, control_plane: ControlPlane, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """`(None, created)` after the 201, `(before, written)` after each accepted PUT (spec or status); an
    observer that raises is logged and fails no write; another replica's store does not tell of them."""
    store = KubernetesTaskStore(api_client, namespace)
    other = KubernetesTaskStore(api_client, namespace)
    await store.open()
    await other.open()
    heard: list[tuple[TaskRecord | None, TaskRecord]] = []
    elsewhere: list[TaskRecord] = []

    def broken(before: TaskRecord | None, after: TaskRecord) -> None:
        raise RuntimeError("observer bug")

    store.observe(broken)
    store.observe(lambda before, after: heard.append((before, after)))
    other.observe(lambda before, after: elsewhere.append(after))
    try:
        with caplog.at_level(logging.ERROR, logger="mcp_tasks.store"):
            created = await store.create(_new_record())
            asked = await ask(store, created.task_id, ["q"])  # executor: the status subresource
            answer = {"q": {"action": "accept", "content": {}}}
            answered, _ = await transact(  # client: spec
                store,
                created.task_id,
                lambda r: (transitions.answer_input_requests(r, answer, utc_now()), None),
                Writer.CLIENT,
            )
        assert heard == [(None, created), (created, asked), (asked, answered)]
        assert answered.status is TaskStatus.WORKING and answered.version != asked.version
        stored = get_object(control_plane, namespace, created.task_id)
        assert stored is not None and stored["spec"]["inputResponses"] == answer, "every write stood"
        assert [r.getMessage() for r in caplog.records].count(f"task write observer {broken!r} failed") == 3
        await until(lambda: getattr(other._cache.get(created.task_id), "version", None) == answered.version)
        assert elsewhere == [], "a store tells of its own writes, not of what its watch sees"
    finally:
        await other.aclose()
        await store.aclose()
