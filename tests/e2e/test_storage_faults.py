"""Storage faults on the embedded server: a task store that cannot write is answered clearly and loses nothing.

Our choice (crash-only review): while SQLite refuses writes, requests that need a write get HTTP 503 with
`Retry-After` and a message saying the task store is unavailable; reads keep working; a running tool keeps
running (its supervisor retries the lease renewal, the tool's runtime retries its 503s) and its result
lands once the store writes again. The fault is real SQLite behaviour on the real file: the server's
write connection is switched to `PRAGMA query_only`, so every write fails with "attempt to write a
readonly database", exactly as on a read-only file system.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
from mcp_types import jsonrpc

from mcp_tasks.protocol.models import TaskStatus
from mcp_tasks.runner.outcomes import KeptOutcomes
from mcp_tasks.store.sqlite import SqliteTaskStore
from mcp_tasks.tasks import transitions
from mcp_tasks.tasks.ids import mint_task_id
from mcp_tasks.tasks.interfaces import utc_now
from mcp_tasks.tasks.owner import Owner
from mcp_tasks.worker.executions import Finished
from tests.conftest import Embedded, McpHttp, server_settings, serving, start_embedded, until
from tests.unit.manifests import tool_spec


async def test_a_store_that_cannot_write_is_503_reads_work_and_running_work_survives(
    embedded: Embedded, mcp: McpHttp
) -> None:
    task_id = await mcp.start_task("sleeper", {"seconds": 2})
    await mcp.wait_task(task_id, lambda task: "sleeping" in str(task.get("statusMessage", "")))
    writer = embedded.store._w
    await writer.execute("PRAGMA query_only = ON")
    try:
        refused = await mcp.call_tool("sleeper", {"seconds": 0})
        assert refused.status == 503 and refused.headers["Retry-After"].isdigit(), refused.body
        assert refused.error["code"] == jsonrpc.INTERNAL_ERROR
        assert "task store is unavailable" in refused.error["message"]
        assert "readonly" in refused.error["message"], "the message says why"
        assert (await mcp.get(task_id)).result["status"] == "working", "reads keep working"
        # Stays: hold the fault past the tool's end and several lease renewals (lease 3 s, renewed every 1 s):
        # renewals failing for longer than the lease is the condition under test, and it takes real time.
        await asyncio.sleep(3.5)
        assert (await mcp.get(task_id)).result["status"] == "working"
    finally:
        await writer.execute("PRAGMA query_only = OFF")
    done = await mcp.wait_status(task_id, "completed", "failed", timeout_s=20)
    assert done["status"] == "completed", done
    assert done["result"]["content"][0]["text"] == "slept 2s on attempt 1"
    assert (await mcp.call_tool("sleeper", {"seconds": 0})).result["resultType"] == "task", "writes work again"


async def test_a_run_that_finished_while_the_store_could_not_write_is_recorded_after_a_graceful_stop(
    tmp_path: Path, http_session: aiohttp.ClientSession
) -> None:
    """Issue 21 item 6: the tool posted its result while the store refused writes, then the server stopped
    gracefully. The task stays unfinished in the file, its outcome kept beside it; the next start records
    the real result instead of declaring the outcome unknown."""
    settings = server_settings(tmp_path / "data")
    data_dir = settings.serve.data_dir
    server, web_runner = await start_embedded(settings)
    try:
        mcp = McpHttp(http_session, server.url, changed=server.changed)
        gate = tmp_path / "gate"
        task_id = await mcp.start_task("gated", {"gate": str(gate)})
        await mcp.wait_task(task_id, lambda task: task.get("statusMessage") == "waiting for the gate")
        await server.store._w.execute("PRAGMA query_only = ON")
        gate.touch()  # the tool answers now, into a store that cannot write
        executions = server.runner.executions._by_id.values()
        refused = await until(lambda: next((e for e in executions if e.unrecorded is not None), None))
        assert refused.task_id == task_id, "the tool posted its result and was refused (503): it retries"
    finally:
        await web_runner.cleanup()  # a graceful stop while the store still cannot write
    async with SqliteTaskStore(data_dir / "tasks.sqlite3") as store:
        left = await store.get(task_id)
    assert left.status is TaskStatus.WORKING, "not declared lost: the next start decides"
    kept = data_dir / "outcomes" / f"{task_id}.outcome.json"
    assert kept.exists()

    async with serving(settings) as again:
        mcp = McpHttp(http_session, again.url, changed=again.changed)
        done = await mcp.wait_status(task_id, "completed", "failed")
        # the file goes after the durable write that records it (so a crash between keeps it, never loses it)
        await until(lambda: not kept.exists())
    assert done["status"] == "completed", done
    assert done["result"]["content"][0]["text"] == "passed the gate on attempt 1"


KEPT = Finished(
    result={"content": [{"type": "text", "text": "kept"}], "isError": False}, error=None, status_message=None
)


async def test_kept_outcomes_of_finished_or_deleted_tasks_are_removed_at_start_and_by_the_expiry_sweep(
    tmp_path: Path, http_session: aiohttp.ClientSession
) -> None:
    """Our own choice (issue 21 item 6): a kept outcome (`<data>/outcomes/<taskId>.outcome.json`) whose task
    ended another way, or is gone, is removed at the next start and by the expiry sweep; an unfinished
    task's stays for its next claim to record."""
    settings = server_settings(tmp_path / "data")
    data_dir = settings.serve.data_dir
    folder = data_dir / "outcomes"
    kept = KeptOutcomes(folder)
    data_dir.mkdir(parents=True)
    cancelled = transitions.cancel(
        transitions.new_task(mint_task_id(), Owner("t", "s", "static"), tool_spec(), {}, utc_now()), utc_now()
    )
    async with SqliteTaskStore(data_dir / "tasks.sqlite3") as store:
        await store.create(cancelled)
    gone = mint_task_id()
    kept.save(cancelled.task_id, 1, KEPT)
    kept.save(gone, 1, KEPT)
    (folder / f"{mint_task_id()}.outcome.partial").write_text("{")  # a save cut short, of a task that is gone
    assert len(kept.task_ids()) == 3

    async with serving(settings) as server:
        await until(lambda: not kept.task_ids())  # at start-up: a finished task's, a gone task's, a partial
        mcp = McpHttp(http_session, server.url, changed=server.changed)
        task_id = await mcp.start_task("gated", {"gate": str(tmp_path / "never")})
        await mcp.wait_task(task_id, lambda task: task.get("statusMessage") == "waiting for the gate")
        kept.save(task_id, 99, KEPT)  # an unfinished task's (of another attempt: its claims ignore it)
        kept.save(gone, 1, KEPT)
        await until(lambda: kept.task_ids() == [task_id])  # a sweep ran and kept the unfinished task's
        await mcp.cancel(task_id)
        assert (await mcp.wait_status(task_id, "cancelled", "failed", "completed"))["status"] == "cancelled"
        await until(lambda: not kept.task_ids())  # the next sweep: its task ended another way
