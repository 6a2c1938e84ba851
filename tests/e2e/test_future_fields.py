"""A task record holding fields a newer version wrote is read, served, run to completion and keeps them
(issue 30 §3, embedded): a real server on a real SQLite file, a real tool process, HTTP with bearer tokens.

The newer version is played by writes to the same SQLite file from another connection, as a newer
`mcptasks serve` sharing the data folder (or the one before a downgrade) writes them: the record's JSON body
gains keys this version does not know, in a compare-and-swap that bumps the row's version.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import aiosqlite

from mcp_tasks.store.manifests import load_manifest_file
from mcp_tasks.store.sqlite import SqliteTaskStore
from mcp_tasks.tasks import transitions
from mcp_tasks.tasks.ids import mint_task_id
from mcp_tasks.tasks.owner import Owner
from tests.conftest import REPO, McpHttp, server_settings, serving, until, with_tokens

ALICE = Owner("acme", "alice", "static")
"""`alice-token`'s principal (tests/conftest.py `TOKENS`), vouched for by the static token file."""
WRITTEN_AT_CREATE = {"futureField": {"kept": [1, 2], "by": "a newer version"}}
"""What the newer version wrote with the task, before this version ever saw it."""
WRITTEN_MID_RUN = {"futureProgress": {"phase": "waiting", "nested": {"n": 3}}}
"""What the newer version wrote while this version's run waited for input."""


async def _row(database: Path, task_id: str) -> tuple[int, dict[str, Any]]:
    """The row's version and its JSON body, as the file holds them now."""
    async with aiosqlite.connect(database) as connection:
        rows = list(await connection.execute_fetchall("SELECT version, body FROM tasks WHERE task_id = ?", (task_id,)))
    ((version, body),) = rows
    return int(version), dict(json.loads(body))


async def _write_as_newer_version(database: Path, task_id: str, fields: dict[str, Any]) -> int:
    """Add `fields` to the record's body in one compare-and-swap on its version, retried when this version's
    runner wrote first; return the version written."""

    async def swapped() -> int | None:
        version, body = await _row(database, task_id)
        async with aiosqlite.connect(database) as connection:
            await connection.execute("PRAGMA busy_timeout = 5000")
            cursor = await connection.execute(
                "UPDATE tasks SET body = ?, version = ? WHERE task_id = ? AND version = ?",
                (json.dumps({**body, **fields}), version + 1, task_id, version),
            )
            await connection.commit()
        return version + 1 if cursor.rowcount == 1 else None

    return await until(swapped, interval_s=0.01)


async def test_a_record_with_fields_of_a_newer_version_is_served_run_to_completion_and_keeps_them(
    tmp_path: Path, http_session: aiohttp.ClientSession
) -> None:
    """Our rule for rolling upgrades and downgrades (issue 30 §3, docs/design.md §4): records are read
    tolerantly and every rewrite keeps the fields this version did not write. A newer version created the
    task with a field this one does not know; this version claims it, runs its tool, which asks for
    input; the newer version writes another field meanwhile; the owner reads the task over HTTP (another
    principal still gets what an unknown id gets), answers, and the run completes with its real result. Every
    write of this version (claim, process record, renewals, the input round, the answer, the result) left
    both fields as the newer version wrote them."""
    settings = with_tokens(server_settings(tmp_path / "data"), tmp_path)
    database = tmp_path / "data" / "tasks.sqlite3"
    (tmp_path / "data").mkdir()
    tool = next(
        t for t in load_manifest_file(REPO / "conformance" / "tools" / "fixtures.yaml") if t.name == "confirm_delete"
    )
    record = transitions.new_task(
        mint_task_id(),
        ALICE,
        tool,
        {"filename": "report.txt"},
        datetime.now(UTC),
        client_capabilities={"elicitation": {}},
    )
    async with SqliteTaskStore(database) as store:
        await store.create(record)
    task_id = record.task_id
    created_version = await _write_as_newer_version(database, task_id, WRITTEN_AT_CREATE)

    async with serving(settings) as server:
        alice = McpHttp(http_session, server.url, "alice-token", server.changed)
        bob = McpHttp(http_session, server.url, "bob-token")
        waiting = await alice.wait_status(task_id, "input_required", "completed", "failed", "cancelled")
        assert waiting["status"] == "input_required", waiting
        mid_run_version = await _write_as_newer_version(database, task_id, WRITTEN_MID_RUN)
        assert mid_run_version > created_version

        served = (await alice.get(task_id)).result
        assert served["status"] == "input_required" and served["inputRequests"] == waiting["inputRequests"], served
        foreign, unknown = await bob.get(task_id), await bob.get(mint_task_id())
        assert (foreign.status, foreign.error) == (unknown.status, unknown.error)

        (key,) = served["inputRequests"]
        answered = await alice.update(task_id, {key: {"action": "accept", "content": {"confirm": True}}})
        assert answered.status == 200, answered.body
        done = await alice.wait_status(task_id, "completed", "failed", "cancelled")
        assert done["status"] == "completed" and not done["result"].get("isError"), done
        assert done["result"]["content"][0]["text"] == "Deleted report.txt"

    final_version, body = await _row(database, task_id)
    assert final_version > mid_run_version + 2, "this version wrote the record after the newer one, several times"
    assert {key: body.get(key) for key in (*WRITTEN_AT_CREATE, *WRITTEN_MID_RUN)} == {
        **WRITTEN_AT_CREATE,
        **WRITTEN_MID_RUN,
    }
    assert body["result"]["content"][0]["text"] == "Deleted report.txt"
