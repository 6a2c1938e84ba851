"""Artifacts in S3-compatible object storage, end to end on the embedded server, against a real S3 server.

The server is SeaweedFS (`weed server -filer -s3`, built by tests/objectstore/build.sh), signed requests,
one bucket per test. Our choice (docs/kubernetes.md, "Artifacts in object storage"): a result above the
inline cap is one object `<prefix><taskId>/result.json`; `resources/read` serves it to the task's owner
only; expiry deletes it with its task; while the store is down a read is 503 with `Retry-After` and a
finishing tool's result write is 503 too (its runtime retries), so nothing is lost when it comes back.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from mcp_types import jsonrpc

from mcp_tasks.store.s3 import S3ArtifactStore
from mcp_tasks.tasks.errors import StoreUnavailable
from tests.conftest import TOOL_DIRS, Embedded, McpHttp, server_settings, serving, until, with_tokens
from tests.objectstore.server import S3Server, big_result_short_ttl_tool, running

SIZE = 300 * 1024
PREFIX = "e2e/"


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with running(tmp_path_factory.mktemp("s3")) as server:
        yield server


def short_ttl_big_result(folder: Path) -> Path:
    """A tools folder holding `big_result_short_ttl`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tools.yaml").write_text(yaml.safe_dump(big_result_short_ttl_tool()))
    return folder


def link_of(task: dict[str, Any]) -> str:
    return str(next(block for block in task["result"]["content"] if block["type"] == "resource_link")["uri"])


def serving_with_s3(s3_server: S3Server, tmp_path: Path, bucket: str) -> AbstractAsyncContextManager[Embedded]:
    """An embedded server with the bearer tokens of `TOKENS`, its artifacts in `bucket` under `PREFIX`."""
    settings = with_tokens(server_settings(tmp_path / "data"), tmp_path)
    tools = (*TOOL_DIRS, short_ttl_big_result(tmp_path / "tools"))
    settings = replace(
        settings, serve=replace(settings.serve, tools_dirs=tools), artifacts=s3_server.settings(bucket, PREFIX)
    )
    return serving(settings)


async def test_a_300_kb_result_is_one_object_read_back_by_its_owner_only(s3_server: S3Server, tmp_path: Path) -> None:
    bucket = await s3_server.create_bucket()
    async with serving_with_s3(s3_server, tmp_path, bucket) as server, aiohttp.ClientSession() as session:
        alice = McpHttp(session, server.url, "alice-token", server.changed)
        task_id = await alice.start_task("big_result", {"size": SIZE})
        done = await alice.wait_status(task_id, "completed", "failed")
        assert done["status"] == "completed", done
        uri = link_of(done)
        assert await s3_server.keys(bucket) == [f"{PREFIX}{task_id}/result.json"], "one object, in the bucket"
        assert not (tmp_path / "data" / "artifacts").exists(), "nothing on the local disk"
        read = await alice.request("resources/read", {"uri": uri})
        assert read.result["contents"][0]["mimeType"] == "application/json"
        assert json.loads(read.result["contents"][0]["text"])["content"][0]["text"] == "x" * SIZE
        missing = await alice.request("resources/read", {"uri": uri.replace(task_id, "0" * 32)})
        for intruder in ("bob-token", "eve-token"):
            foreign = await McpHttp(session, server.url, intruder).request("resources/read", {"uri": uri})
            assert foreign.error["code"] == jsonrpc.INVALID_PARAMS
            assert foreign.error["message"] == missing.error["message"], "a foreign artifact looks like a missing one"


async def test_expiry_deletes_the_object_with_its_task(s3_server: S3Server, tmp_path: Path) -> None:
    bucket = await s3_server.create_bucket()
    async with serving_with_s3(s3_server, tmp_path, bucket) as server, aiohttp.ClientSession() as session:
        alice = McpHttp(session, server.url, "alice-token", server.changed)
        task_id = await alice.start_task("big_result_short_ttl", {"size": SIZE})
        done = await alice.wait_status(task_id, "completed", "failed")
        assert done["status"] == "completed", done
        assert await s3_server.keys(bucket) == [f"{PREFIX}{task_id}/result.json"]

        async def expired() -> bool:
            return "error" in (await alice.get(task_id)).body

        await until(expired)  # the runner's sweep (every 0.2 s here) after the 5 s TTL
        await until(lambda: _no_keys(s3_server, bucket))  # deleted with the task, by the same sweep


async def _no_keys(s3_server: S3Server, bucket: str) -> bool:
    return not await s3_server.keys(bucket)


async def test_the_store_down_is_503_and_a_result_finished_meanwhile_lands_when_it_is_back(
    s3_server: S3Server, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bucket = await s3_server.create_bucket()
    async with serving_with_s3(s3_server, tmp_path, bucket) as server, aiohttp.ClientSession() as session:
        alice = McpHttp(session, server.url, "alice-token", server.changed)
        before = await alice.start_task("big_result", {"size": SIZE})
        before_uri = link_of(await alice.wait_status(before, "completed"))

        await asyncio.to_thread(s3_server.stop)
        try:
            refused = await alice.request("resources/read", {"uri": before_uri})
            assert refused.status == 503 and refused.headers["Retry-After"].isdigit(), refused.body
            assert refused.error["code"] == jsonrpc.INTERNAL_ERROR
            assert "unreachable" in refused.error["message"] and "MCPTASKS_S3_ENDPOINT_URL" in refused.error["message"]
            with caplog.at_level(logging.WARNING, logger="mcp_tasks.worker"):
                during = await alice.start_task("big_result", {"size": SIZE})
                await until(lambda: any("artifact store" in r.getMessage() for r in caplog.records), timeout_s=20)
            assert (await alice.get(during)).result["status"] == "working", "the result is not dropped, not failed"
        finally:
            await asyncio.to_thread(s3_server.start)

        done = await alice.wait_status(during, "completed", "failed", timeout_s=30)  # the runtime's back-off: ≤ 5 s
        assert done["status"] == "completed", done
        for task_id, uri in ((before, before_uri), (during, link_of(done))):
            read = await alice.request("resources/read", {"uri": uri})
            assert json.loads(read.result["contents"][0]["text"])["content"][0]["text"] == "x" * SIZE, task_id
        assert await s3_server.keys(bucket) == sorted(f"{PREFIX}{t}/result.json" for t in (before, during))


async def test_a_missing_bucket_is_a_clear_unavailable_error_naming_the_setting(s3_server: S3Server) -> None:
    store = S3ArtifactStore(s3_server.settings("no-such-bucket-here"), 1024 * 1024)
    await store.open()
    try:
        with pytest.raises(StoreUnavailable, match=r"'no-such-bucket-here' does not exist \(MCPTASKS_S3_BUCKET\)"):
            await store.put("a" * 32, "result.json", b"{}", "application/json")
        with pytest.raises(StoreUnavailable, match="does not exist"):
            await store.get("a" * 32, "result.json")
    finally:
        await store.aclose()


async def test_refused_credentials_are_a_clear_unavailable_error_without_the_secret(s3_server: S3Server) -> None:
    bucket = await s3_server.create_bucket()
    settings = s3_server.settings(bucket, s3_secret_access_key="wrong-secret-value")
    store = S3ArtifactStore(settings, 1024 * 1024)
    await store.open()
    try:
        with pytest.raises(StoreUnavailable, match="refused access") as raised:
            await store.put("a" * 32, "result.json", b"{}", "application/json")
        assert "MCPTASKS_S3_SECRET_ACCESS_KEY" in str(raised.value)
        assert "wrong-secret-value" not in str(raised.value)
    finally:
        await store.aclose()


async def test_encrypted_objects_and_deletes_missed_while_down_are_retried(s3_server: S3Server) -> None:
    """`s3_sse` sends `ServerSideEncryption: AES256` on every write; a task's objects that could not be
    deleted while the store was down are deleted by a later `delete_task`."""
    bucket = await s3_server.create_bucket()
    store = S3ArtifactStore(s3_server.settings(bucket, "enc", s3_sse=True), 1024 * 1024)
    await store.open()
    first, second = "a" * 32, "b" * 32
    try:
        for task_id in (first, second):
            await store.put(task_id, "result.json", b'{"ok": true}', "application/json")
        async with s3_server.client() as client:
            head = await client.head_object(Bucket=bucket, Key=f"enc/{first}/result.json")
        assert head.get("ServerSideEncryption") == "AES256"
        artifact = await store.get(first, "result.json")
        assert artifact is not None and artifact.data == b'{"ok": true}' and artifact.mime_type == "application/json"
        assert await store.get(first, "other.json") is None

        await asyncio.to_thread(s3_server.stop)
        try:
            await store.delete_task(first)  # logged, kept for later: never raises into an expiry sweep
        finally:
            await asyncio.to_thread(s3_server.start)
        assert await s3_server.keys(bucket) == [f"enc/{first}/result.json", f"enc/{second}/result.json"]
        await store.delete_task(second)
        assert await s3_server.keys(bucket) == []
    finally:
        await store.aclose()
