"""Outcomes are fenced by the run (issue 30): a run that lost its task to another executor (paused past
its lease, then woken) writes nothing over its successor's work, on a real SQLite file."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from mcp_tasks.protocol.models import TaskStatus
from mcp_tasks.runner.context import RunContext
from mcp_tasks.runner.settings import RunnerSettings
from mcp_tasks.runner.tokens import WorkerTokens
from mcp_tasks.store.artifacts import FileArtifactStore
from mcp_tasks.store.manifests import load_manifest_file
from mcp_tasks.store.sqlite import SqliteTaskStore
from mcp_tasks.tasks import transitions
from mcp_tasks.tasks.ids import mint_task_id
from mcp_tasks.tasks.interfaces import Writer
from mcp_tasks.tasks.owner import Owner
from mcp_tasks.worker.channel import ChannelError, WorkerChannel
from mcp_tasks.worker.executions import Execution
from mcp_tasks.worker.warm_auth import WarmCallSigner
from tests.conftest import REPO

T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
LEASE = timedelta(seconds=10)
ELICIT = {"method": "elicitation/create", "params": {"message": "?", "requestedSchema": {"type": "object"}}}
REAL_RESULT = {"content": [{"type": "text", "text": "the re-run's real result"}]}
STALE_RESULT = {"content": [{"type": "text", "text": "exited with code -15"}], "isError": True}


def _context(store: SqliteTaskStore, tmp_path: Path, holder: str) -> RunContext:
    artifacts = FileArtifactStore(tmp_path / "artifacts", 1 << 20)
    return RunContext(
        store,
        None,  # type: ignore[arg-type]  # the outcome writes read no tool
        artifacts,
        lambda: T0 + LEASE * 3,
        RunnerSettings(),
        holder,
        WorkerTokens(secrets.token_bytes(32)),
        WarmCallSigner(Ed25519PrivateKey.generate()),
        tmp_path,
    )


async def test_a_run_that_lost_its_lease_writes_nothing_over_the_re_run(tmp_path: Path) -> None:
    tool = load_manifest_file(REPO / "conformance" / "tools" / "fixtures.yaml")[0]
    async with SqliteTaskStore(tmp_path / "t.sqlite3") as store:
        record = transitions.new_task(mint_task_id(), Owner("t", "s", "static"), tool, {}, T0)
        created = await store.create(record)
        first = await store.compare_and_swap(transitions.claim(created, "A", T0, LEASE, 60_000), Writer.EXECUTOR)
        assert first.attempt == 1
        # A is paused past its lease; B takes the task over and starts its own run
        second = await store.compare_and_swap(
            transitions.claim(first, "B", T0 + LEASE * 2, LEASE, 60_000), Writer.EXECUTOR
        )
        assert second.attempt == 2
        paused, taker = _context(store, tmp_path, "A"), _context(store, tmp_path, "B")

        stale = Execution(tool=tool, arguments={}, task_id=record.task_id, attempt=1)
        channel = WorkerChannel(store, paused.artifacts, paused.clock, 1 << 16)
        for write in (
            channel.finish(stale, {"result": STALE_RESULT}),
            channel.set_status_message(stale, "still here"),
            channel.ask(stale, {"k": ELICIT}),
            channel.take_responses(stale, ["k"], 0),
        ):
            with pytest.raises(ChannelError, match=r"attempt 1\).*superseded") as refused:
                await write
            assert refused.value.status == 409
        await paused.finish_if_running(
            record.task_id, lambda r, now: transitions.complete(r, STALE_RESULT, now), attempt=1
        )
        await paused.finish_if_running(record.task_id, transitions.failing("Internal error", "InternalError"))
        untouched = await store.get(record.task_id)
        assert untouched.status is TaskStatus.WORKING and untouched.version == second.version

        current = Execution(tool=tool, arguments={}, task_id=record.task_id, attempt=2)
        await WorkerChannel(store, taker.artifacts, taker.clock, 1 << 16).set_status_message(current, "re-running")
        await taker.finish_if_running(record.task_id, lambda r, now: transitions.complete(r, REAL_RESULT, now), 2)
        done = await store.get(record.task_id)
        assert done.status is TaskStatus.COMPLETED and done.result is not None
        assert done.result["content"] == REAL_RESULT["content"]
