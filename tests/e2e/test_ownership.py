"""Ownership: every task method is authorized by (tenant, subject); a foreign task looks exactly like a missing one."""

from __future__ import annotations

import stat
from pathlib import Path

import aiohttp

from tests.conftest import Embedded, McpHttp, server_settings, serving


async def test_requests_without_a_valid_token_are_401(secured: Embedded, http_session: aiohttp.ClientSession) -> None:
    for token in (None, "wrong"):
        reply = await McpHttp(http_session, secured.url, token=token).request("tools/list")
        assert reply.status == 401
        assert reply.headers["WWW-Authenticate"].startswith("Bearer")


async def test_another_principal_sees_a_task_exactly_like_an_unknown_id(
    secured: Embedded, http_session: aiohttp.ClientSession
) -> None:
    """SEP-2663 Security: bind each task to its creator; knowing the id is never permission."""
    alice = McpHttp(http_session, secured.url, token="alice-token")
    task_id = await alice.start_task("confirm_delete", {"filename": "secret.txt"})
    await alice.wait_status(task_id, "input_required")
    for intruder in ("bob-token", "eve-token"):
        other = McpHttp(http_session, secured.url, token=intruder)
        unknown = [await other.get("0" * 32), await other.update("0" * 32, {}), await other.cancel("0" * 32)]
        foreign = [
            await other.get(task_id),
            await other.update(task_id, {"confirm": {"action": "accept", "content": {"confirm": True}}}),
            await other.cancel(task_id),
        ]
        assert [r.status for r in foreign] == [r.status for r in unknown]
        assert [r.error for r in foreign] == [r.error for r in unknown]
    still = (await alice.get(task_id)).result
    assert still["status"] == "input_required" and "confirm" in still["inputRequests"]
    await alice.cancel(task_id)
    assert (await alice.wait_status(task_id, "cancelled"))["status"] == "cancelled"


async def test_listen_leaves_foreign_task_ids_out_of_the_acknowledgement(
    secured: Embedded, http_session: aiohttp.ClientSession
) -> None:
    alice = McpHttp(http_session, secured.url, token="alice-token")
    task_id = await alice.start_task("slow_compute", {"seconds": 0, "label": "x"})
    bob = McpHttp(http_session, secured.url, token="bob-token")
    reply = await bob.request("subscriptions/listen", {"notifications": {"taskIds": [task_id]}})
    frames = [line for line in reply.body.splitlines() if line.startswith("data: ")]
    assert '"taskIds":[]' in frames[0]
    assert task_id not in reply.body


async def test_other_local_accounts_cannot_look_into_the_data_folder(
    tmp_path: Path, http_session: aiohttp.ClientSession
) -> None:
    """Every tenant's arguments, answers and results sit in the SQLite file and the artifacts below the
    data folder: a folder made world-readable beforehand (umask 022) is closed to its owner at start."""
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o755)
    data_dir.chmod(0o755)
    async with serving(server_settings(data_dir)) as server:
        mcp = McpHttp(http_session, server.url)
        await mcp.wait_status(await mcp.start_task("slow_compute", {"seconds": 0}), "completed")
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    assert (data_dir / "tasks.sqlite3").exists()
