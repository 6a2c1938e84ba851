"""A server paused past its lease wakes to find its tasks taken over, and writes nothing over them (issue 30 §4,
embedded): two real `mcptasks serve` processes on one data folder, one SQLite file, real tool processes.

The pause is real: SIGSTOP on server A while its tools run, so its leases run out while its supervisors,
their timers and its open connections wait for it; SIGCONT then lets it act on all of that at once.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Final

import aiohttp

from mcp_tasks.protocol.models import TaskStatus
from mcp_tasks.runtime import contract
from mcp_tasks.store.sqlite import SqliteTaskStore
from mcp_tasks.tasks.record import TaskRecord
from tests.conftest import exited, until
from tests.e2e.test_durability import ServerProcess, client, tool_pids

IDEMPOTENT_TASKS = 8
"""Tasks of an idempotent tool in the round: B runs each again."""
OTHER_TASKS = 2
"""Tasks of a tool that is not idempotent in the same round: B fails each, its outcome unknown."""
A_SAYS = ("without a result", "outcome is not recorded", "lease lost")
"""What a woken supervisor of A logs about its run: its tool exited (killed by B) before it records that
outcome, or it found the task held by another (`runner.supervision`, `runner.context`)."""
WAIT_S = 20.0
"""Bound of each wait on another process (a lease of 3 s, claim polls of 1 s, a loaded two-core machine)."""


async def _records(data_dir: Path, task_ids: list[str]) -> dict[str, TaskRecord]:
    """The task records as the shared SQLite file holds them now (a fresh store each time: no cache of ours)."""
    async with SqliteTaskStore(data_dir / "tasks.sqlite3") as store:
        return {task_id: await store.get(task_id) for task_id in task_ids}


def _holder_pid(record: TaskRecord) -> int | None:
    """The pid of the server whose runner holds `record`'s lease (holders are `host:pid:random`)."""
    return None if record.lease is None else int(record.lease.holder.split(":")[1])


def _worker_credentials(pid: int) -> tuple[str, str]:
    """The worker API URL of a tool process's run and its token, from its environment (the run's contract)."""
    variables = dict(
        entry.split(b"=", 1) for entry in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if b"=" in entry
    )
    return variables[contract.ENV_WORKER_URL.encode()].decode(), variables[contract.ENV_WORKER_TOKEN.encode()].decode()


STALE_REPORTS: Final = (
    (contract.PATH_STATUS, {"statusMessage": "stale status"}),
    (contract.PATH_PROGRESS, {"progress": 99, "total": 100, "message": "stale progress"}),
    (contract.PATH_INPUT_REQUESTS, {"inputRequests": {"late": {"method": "elicitation/create", "params": {}}}}),
    (contract.PATH_RESULT, {"result": {"content": [{"type": "text", "text": "the stale run's result"}]}}),
)
"""What a stale run might still send A once A wakes: a status, progress, a round of input, its result."""


def _tool_pid(record: TaskRecord) -> int | None:
    """The pid of the tool process running `record`'s leased attempt, once its runner recorded it."""
    running = None if record.lease is None else record.lease.process
    return None if running is None else running.pid


async def test_a_server_paused_past_its_lease_never_writes_over_the_runs_that_replaced_its_own(
    tmp_path: Path, http_session: aiohttp.ClientSession
) -> None:
    """Our rule (docs/design.md §7, fenced outcomes): every outcome written for a run names that run, and a
    run whose task another executor holds now writes nothing. Server A runs ten tasks (eight of an idempotent
    tool, two of one that is not); it is frozen past its lease; server B, on the same data folder, stops A's
    tool processes (A cannot), runs the idempotent tasks again and fails the others with the outcome unknown.
    A is woken while B's re-runs are still running, so each of A's supervisors finds its tool killed
    ("exited with code -15") and would record that outcome: none lands, nor anything A's killed runs
    report late with their own credentials (status, progress, input requests, result). Once A has stopped
    altogether, the re-runs finish, and each task ends with its re-run's real result; the failed ones stay as
    B decided."""
    data_dir = tmp_path / "data"
    gate = tmp_path / "gate"
    # Leases of 3 s (renewed each second): a loaded machine's lag never lets them lapse unpaused.
    server_a = ServerProcess(data_dir, log_path=tmp_path / "a.log", MCPTASKS_LEASE_DURATION_S="3")
    server_b = ServerProcess(data_dir, log_path=tmp_path / "b.log", MCPTASKS_LEASE_DURATION_S="3")
    try:
        mcp_a = client(http_session, await server_a.start())
        idempotent = [await mcp_a.start_task("gated_idempotent", {"gate": str(gate)}) for _ in range(IDEMPOTENT_TASKS)]
        others = [await mcp_a.start_task("gated", {"gate": str(gate)}) for _ in range(OTHER_TASKS)]
        task_ids = idempotent + others
        assert server_a.process is not None
        a_pid = server_a.process.pid

        async def running_on_a() -> dict[str, TaskRecord] | None:  # each tool started, its process recorded
            records = await _records(data_dir, task_ids)
            started = all(_tool_pid(r) is not None and _holder_pid(r) == a_pid for r in records.values())
            return records if started else None

        on_a = await until(running_on_a, timeout_s=WAIT_S, interval_s=0.1)
        a_tools = {task_id: _tool_pid(record) for task_id, record in on_a.items()}
        for task_id, pid in a_tools.items():
            assert tool_pids(task_id) == [pid], "one tool process per task, A's"
        stale_runs = {task_id: _worker_credentials(pid) for task_id, pid in a_tools.items() if pid is not None}

        # B starts only now, so that A alone claimed the round (B finds A's leases live, and waits).
        mcp_b = client(http_session, await server_b.start())
        assert server_b.process is not None
        b_pid = server_b.process.pid
        server_a.process.send_signal(signal.SIGSTOP)

        async def taken_over() -> dict[str, TaskRecord] | None:
            records = await _records(data_dir, task_ids)
            rerunning = all(
                r.status is TaskStatus.WORKING
                and r.attempt == 2
                and _holder_pid(r) == b_pid
                and _tool_pid(r) is not None
                for task_id, r in records.items()
                if task_id in idempotent
            )
            failed = all(records[task_id].status is TaskStatus.FAILED for task_id in others)
            return records if rerunning and failed else None

        decided_by_b = await until(taken_over, timeout_s=WAIT_S, interval_s=0.1)
        for task_id in others:
            assert "outcome is unknown" in (decided_by_b[task_id].status_message or ""), decided_by_b[task_id]
            assert decided_by_b[task_id].attempt == 1, "not run again"
        for pid in a_tools.values():
            assert pid is not None
            await exited(pid, timeout_s=WAIT_S)  # stopped by B: A, frozen, cannot have done it
        for task_id in idempotent:
            assert tool_pids(task_id) == [_tool_pid(decided_by_b[task_id])], "only B's re-run runs"

        server_a.process.send_signal(signal.SIGCONT)

        def a_acted_on_each() -> bool:  # each of A's supervisors met its run's end (and said so, WARNING)
            log = (tmp_path / "a.log").read_text()
            lines = [line for line in log.splitlines() if any(said in line for said in A_SAYS)]
            return all(any(task_id in line for line in lines) for task_id in idempotent)

        await until(a_acted_on_each, timeout_s=WAIT_S, interval_s=0.1)
        for task_id in idempotent:  # A's stale runs report late, with their own credentials: A takes none of it
            url, token = stale_runs[task_id]
            for path, report in STALE_REPORTS:
                headers = {"Authorization": f"Bearer {token}"}
                async with http_session.post(url + path, json=report, headers=headers) as response:
                    assert response.status in (404, 409), (path, response.status, await response.text())
        await server_a.stop()  # SIGTERM: whatever A still supervised is decided (or left) by its shutdown rule

        after_a = await _records(data_dir, task_ids)
        for task_id in idempotent:
            record = after_a[task_id]
            assert record.status is TaskStatus.WORKING and record.attempt == 2, record
            assert _holder_pid(record) == b_pid and record.result is None, record
            assert record.status_message == "waiting for the gate" and record.progress is None, record
            assert not record.input_requests, record
        for task_id in others:
            assert after_a[task_id].status is TaskStatus.FAILED and after_a[task_id].attempt == 1
            assert after_a[task_id].error == decided_by_b[task_id].error
            assert after_a[task_id].status_message == decided_by_b[task_id].status_message

        gate.touch()
        for task_id in idempotent:
            done = await mcp_b.wait_status(task_id, "completed", "failed", "cancelled", timeout_s=WAIT_S)
            assert done["status"] == "completed" and not done["result"].get("isError"), done
            assert done["result"]["content"][0]["text"] == "passed the gate on attempt 2", done
        for task_id in others:
            failed = (await mcp_b.get(task_id)).result
            assert failed["status"] == "failed" and "outcome is unknown" in failed["statusMessage"], failed
    finally:
        if server_a.process is not None and server_a.process.returncode is None:
            server_a.process.send_signal(signal.SIGCONT)
        await server_a.stop()
        await server_b.stop()
