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

from mcp_types import jsonrpc

from tests.conftest import Embedded, McpHttp


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
