"""Durability across `kill -9`: the handle is never returned before the task is durable, and leases decide what reruns.

Runs the real `mcptasks serve` as a separate process on a real SQLite file, and kills it with SIGKILL.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import pytest

from mcp_tasks.protocol.models import TaskStatus
from mcp_tasks.store.sqlite import SqliteTaskStore
from mcp_tasks.tasks.record import TaskRecord
from tests.conftest import REPO, TOOL_DIRS, McpHttp, exited, reported, until


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class ServerProcess:
    """`mcptasks serve` in a child process on one data folder.

    `flags` are added to its command line, `env` to its environment; with `log_path` its output goes there.
    """

    def __init__(self, data_dir: Path, *flags: str, log_path: Path | None = None, **env: str) -> None:
        self.data_dir = data_dir
        self.flags = flags
        self.log_path = log_path
        self.env = env
        self.process: asyncio.subprocess.Process | None = None
        self.port = 0

    async def start(self) -> str:
        self.port = free_port()
        args = [
            sys.executable,
            "-m",
            "mcp_tasks.cli",
            "serve",
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
        ]
        for folder in TOOL_DIRS:
            args += ["--tools", str(folder)]
        env = {**os.environ, "MCPTASKS_LEASE_DURATION_S": "1.5", "MCPTASKS_LOG_LEVEL": "WARNING", **self.env}
        if self.log_path is None:
            self.process = await asyncio.create_subprocess_exec(*args, *self.flags, cwd=REPO, env=env)
        else:
            with self.log_path.open("ab") as log:
                self.process = await asyncio.create_subprocess_exec(
                    *args, *self.flags, cwd=REPO, env=env, stdout=log, stderr=log
                )
        url = f"http://127.0.0.1:{self.port}"

        async def healthy() -> bool:  # another process: nothing tells us it is listening
            try:
                async with session.get(f"{url}/healthz") as response:
                    return response.status == 200
            except aiohttp.ClientError:
                return False

        async with aiohttp.ClientSession() as session:
            await until(healthy, timeout_s=30)  # a start-up takes 5-15 s on a loaded two-core machine
        return f"{url}/mcp"

    async def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        await self.process.wait()

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.terminate()
            await self.process.wait()


@pytest.fixture
async def server_process(tmp_path: Path) -> AsyncIterator[ServerProcess]:
    server = ServerProcess(tmp_path / "data")
    try:
        yield server
    finally:
        await server.stop()


async def restart_after_kill(server: ServerProcess) -> str:
    await server.kill()
    return await server.start()


def client(session: aiohttp.ClientSession, url: str) -> McpHttp:
    return McpHttp(session, url)


async def test_a_task_handle_survives_kill_9_right_after_it_arrives(
    server_process: ServerProcess, http_session: aiohttp.ClientSession
) -> None:
    """SEP-2663 §Creating Tasks: the task is durably created before `CreateTaskResult` is sent."""
    mcp = client(http_session, await server_process.start())
    task_id = await mcp.start_task("sleeper", {"seconds": 30})
    url = await restart_after_kill(server_process)
    mcp = client(http_session, url)
    reply = await mcp.get(task_id)
    assert reply.result["taskId"] == task_id


async def test_a_second_server_on_a_taken_port_exits_before_it_opens_anything(
    server_process: ServerProcess, tmp_path: Path
) -> None:
    """Our choice (a newcomer's finding: a second `mcptasks serve` beside `make run` opened the store, started a
    runner on the data folder and discovered its servers, then failed to listen): the port is bound first, so
    such a start exits 1 naming the taken address and has opened nothing (its data folder holds no store)."""
    await server_process.start()
    other = tmp_path / "other"
    port = str(server_process.port)
    args = [sys.executable, "-m", "mcp_tasks.cli", "serve", "--port", port, "--data-dir", str(other)]
    for folder in TOOL_DIRS:
        args += ["--tools", str(folder)]
    second = await asyncio.create_subprocess_exec(
        *args, cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    _out, err = await asyncio.wait_for(second.communicate(), timeout=60)
    assert second.returncode == 1, err.decode()
    assert f"cannot listen on 127.0.0.1:{server_process.port}" in err.decode(), err.decode()
    assert not (other / "tasks.sqlite3").exists(), "the store was opened before the port was bound"


def tool_pids(task_id: str, marker_variable: str = "MCPTASKS_TASK_ID") -> list[int]:
    """Pids of the live tool processes running `task_id` (found by the contract variable in their environment;
    a warm tool's workers by `MCPTASKS_SERVE_TOOL=<tool>`)."""
    marker = f"{marker_variable}={task_id}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "environ").read_bytes().split(b"\0"):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


async def kill_tools(task_id: str) -> None:
    for pid in tool_pids(task_id):
        os.kill(pid, signal.SIGKILL)
    for pid in tool_pids(task_id):
        await exited(pid, timeout_s=5)


async def test_a_running_tool_outlives_a_server_crash_and_is_adopted(
    server_process: ServerProcess, http_session: aiohttp.ClientSession
) -> None:
    """Restart rule (ours, docs/design.md §7): a tool still running after kill -9 of its server is adopted
    by the restarted server, runs once to its end, and its result lands; nothing is "outcome unknown"."""
    mcp = client(http_session, await server_process.start())
    task_id = await mcp.start_task("sleeper", {"seconds": 3})
    await mcp.wait_task(task_id, has_status_message)
    (pid,) = tool_pids(task_id)
    mcp = client(http_session, await restart_after_kill(server_process))
    done = await mcp.wait_status(task_id, "failed", "completed", "cancelled", timeout_s=20)
    assert done["status"] == "completed", done
    assert done["result"]["content"][0]["text"] == "slept 3s on attempt 1", "the same run, not a second one"
    await exited(pid, timeout_s=5)  # the adopted tool exits once its result is in, and nothing is left
    assert tool_pids(task_id) == []


@pytest.mark.parametrize("tool", ["warm_sleeper", "warm_sleeper_idempotent"])
async def test_a_warm_call_in_flight_outlives_a_server_crash_and_is_adopted(
    server_process: ServerProcess, http_session: aiohttp.ClientSession, tool: str
) -> None:
    """Restart rule (ours, docs/design.md §7), for warm workers as for processes: a task's call still running
    on a warm worker after kill -9 of its server is re-attached by the restarted server, so a tool that is
    not idempotent ends `completed` by its one run, and an idempotent one is not run again."""
    mcp = client(http_session, await server_process.start())
    task_id = await mcp.start_task(tool, {"seconds": 4})
    await mcp.wait_task(task_id, has_status_message)
    (worker,) = tool_pids(tool, "MCPTASKS_SERVE_TOOL")
    mcp = client(http_session, await restart_after_kill(server_process))
    done = await mcp.wait_status(task_id, "failed", "completed", "cancelled", timeout_s=30)
    assert done["status"] == "completed", done
    text = done["result"]["content"][0]["text"]
    assert text == f"slept on attempt 1 in pid {worker}", "the same run on the same worker, not a second one"
    await exited(worker, timeout_s=10)  # the orphaned worker exits once nothing of it is waited for


async def test_a_non_idempotent_task_whose_tool_died_with_its_server_fails_with_an_unknown_outcome(
    server_process: ServerProcess, http_session: aiohttp.ClientSession
) -> None:
    """Lease rule (ours): the tool may have had side effects, so it is not re-run."""
    mcp = client(http_session, await server_process.start())
    task_id = await mcp.start_task("sleeper", {"seconds": 30})
    await mcp.wait_task(task_id, has_status_message)
    await server_process.kill()
    await kill_tools(task_id)
    mcp = client(http_session, await server_process.start())
    done = await mcp.wait_status(task_id, "failed", "completed", "cancelled")
    assert done["status"] == "failed"
    assert "outcome is unknown" in done["statusMessage"]
    assert done["error"]["code"] == -32603


async def test_an_idempotent_task_whose_tool_died_with_its_server_is_run_again(
    server_process: ServerProcess, http_session: aiohttp.ClientSession
) -> None:
    mcp = client(http_session, await server_process.start())
    task_id = await mcp.start_task("sleeper_idempotent", {"seconds": 1})
    await mcp.wait_task(task_id, has_status_message)
    await server_process.kill()
    await kill_tools(task_id)
    mcp = client(http_session, await server_process.start())
    done = await mcp.wait_status(task_id, "completed", "failed", timeout_s=20)
    assert done["status"] == "completed"
    assert done["result"]["content"][0]["text"] == "slept 1s on attempt 2"


async def test_finished_tasks_and_pending_input_survive_a_restart(
    server_process: ServerProcess, http_session: aiohttp.ClientSession
) -> None:
    mcp = client(http_session, await server_process.start())
    finished = await mcp.start_task("slow_compute", {"seconds": 0, "label": "kept"})
    done = await mcp.wait_status(finished, "completed")
    mcp = client(http_session, await restart_after_kill(server_process))
    assert (await mcp.get(finished)).result["result"] == done["result"]


has_status_message: Callable[[dict[str, object]], bool] = reported  # its tool runs and reported


async def test_a_legacy_call_whose_server_died_is_cancelled_not_adopted_on_restart(
    tmp_path: Path, http_session: aiohttp.ClientSession
) -> None:
    """A hidden task is watched by the call waiting for it (`caller_watch_s`). After kill -9 of the server
    nobody can read its result, so the restarted runner cancels it, and stops its orphaned tool process,
    instead of adopting it or running it again (an idempotent tool would be)."""
    server = ServerProcess(tmp_path / "data", MCPTASKS_CALLER_WATCH_S="2")
    try:
        url = await server.start()
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "sleeper_idempotent", "arguments": {"seconds": 60}},
        }
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2025-11-25",
        }
        response = await http_session.post(url, json=body, headers=headers)
        assert response.content_type == "text/event-stream"

        async def created() -> str | None:  # by the server's process: read its database
            async with SqliteTaskStore(server.data_dir / "tasks.sqlite3") as store:
                rows = list(await store._r.execute_fetchall("SELECT task_id FROM tasks"))
            return str(rows[0][0]) if rows else None

        task_id = await until(created, timeout_s=15, interval_s=0.1)
        pids = await until(lambda: tool_pids(task_id), timeout_s=15, interval_s=0.1)
        await server.kill()
        response.close()
        # Stays: the watch must lapse (2 s of real time, nobody renewing it) before the restart, so that the
        # restarted runner finds it lapsed rather than adopting the run and cancelling later.
        await asyncio.sleep(2.5)
        url = await server.start()

        async def ended() -> TaskRecord | None:
            async with SqliteTaskStore(server.data_dir / "tasks.sqlite3") as store:
                record = await store.get(task_id)
            return record if record.status.is_terminal else None

        record = await until(ended, timeout_s=20, interval_s=0.2)
        assert record.status is TaskStatus.CANCELLED and "nobody can read its result" in (record.status_message or "")
        assert record.attempt == 1, "not run again"
        for pid in pids:
            await exited(pid, timeout_s=10)
        assert tool_pids(task_id) == [], "its orphaned tool process was stopped"
    finally:
        await server.stop()


async def test_a_synchronous_run_parked_in_an_input_round_survives_kill_9(
    server_process: ServerProcess, http_session: aiohttp.ClientSession
) -> None:
    """A synchronous run that asked for input is attempt 1 of its hidden task, its process recorded in
    the lease: after kill -9 the restarted server adopts it, and the client's next rounds (the same
    `requestState`) finish the same run."""
    caps: dict[str, object] = {"elicitation": {}}
    mcp = client(http_session, await server_process.start())
    asked = (await mcp.call_tool("asker", {}, caps=caps)).result
    assert asked["resultType"] == "input_required"
    mcp = client(http_session, await restart_after_kill(server_process))
    answer = {
        "inputResponses": {"q": {"action": "accept", "content": {"a": "A"}}},
        "requestState": asked["requestState"],
    }
    again = (await mcp.call_tool("asker", {}, caps=caps, extra=answer)).result
    assert again["resultType"] == "input_required", again
    (key,) = again["inputRequests"]
    final = {
        "inputResponses": {key: {"action": "accept", "content": {"b": "B"}}},
        "requestState": again["requestState"],
    }
    done = (await mcp.call_tool("asker", {}, caps=caps, extra=final)).result
    assert done["content"][0]["text"] == "A B"


async def test_a_graceful_stop_leaves_a_tool_waiting_for_input_to_the_next_start(
    server_process: ServerProcess, http_session: aiohttp.ClientSession
) -> None:
    """Issue 30 §6 (`MCPTASKS_STOP_HANDS_OVER`, default on): SIGTERM while a non-idempotent tool waits for
    input leaves the tool running and the task `input_required`, as kill -9 would; the next start adopts
    it, and the answer reaches the same process, which finishes the task."""
    mcp = client(http_session, await server_process.start())
    task_id = await mcp.start_task("confirm_delete", {"filename": "kept.txt"})
    waiting = await mcp.wait_status(task_id, "input_required")
    (pid,) = tool_pids(task_id)
    await server_process.stop()  # SIGTERM, as systemd and every process manager send
    assert tool_pids(task_id) == [pid], "the tool outlives a graceful stop"
    mcp = client(http_session, await server_process.start())
    after = (await mcp.get(task_id)).result
    assert after["status"] == "input_required", after
    assert after["inputRequests"] == waiting["inputRequests"]
    (key,) = waiting["inputRequests"]
    answer = {key: {"action": "accept", "content": {"confirm": True}}}
    assert (await mcp.update(task_id, answer)).status == 200
    done = await mcp.wait_status(task_id, "completed", "failed", "cancelled", timeout_s=30)
    assert done["status"] == "completed" and not done["result"].get("isError"), done
    await exited(pid, timeout_s=10)  # the one process answered and finished: no second run


async def test_a_tool_reporting_progress_through_graceful_stops_is_never_told_its_run_is_gone(
    server_process: ServerProcess, http_session: aiohttp.ClientSession
) -> None:
    """Issue 30 §6, found by a newcomer (2 of 6 stops killed `count_primes`): a stopping server no longer
    serves the runs it hands over, and a tool reporting progress in that moment was answered 404, which a
    tool takes as the end of its run. Now it is told to retry (503) until the next start serves it: the
    `sleeper` (not idempotent, reporting every 0.1 s) lives through three stops and ends on attempt 1."""
    mcp = client(http_session, await server_process.start())
    task_id = await mcp.start_task("sleeper", {"seconds": 6})
    await mcp.wait_task(task_id, has_status_message)  # it reports: its process runs
    (pid,) = tool_pids(task_id)
    for _ in range(3):
        await server_process.stop()  # SIGTERM, mid-report
        assert tool_pids(task_id) == [pid], "the tool outlives a graceful stop"
        mcp = client(http_session, await server_process.start())
    done = await mcp.wait_status(task_id, "completed", "failed", "cancelled", timeout_s=30)
    assert done["status"] == "completed" and not done["result"].get("isError"), done
    assert done["result"]["content"][0]["text"] == "slept 6s on attempt 1", done


async def test_a_tool_killed_while_waiting_for_input_is_decided_within_the_lease_after_the_restart(
    server_process: ServerProcess, http_session: aiohttp.ClientSession
) -> None:
    """Issue 30 §6: after a graceful stop, the input-waiting tool's whole process group is killed; the next
    start finds the asker gone once the lease (1.5 s here) has run out and applies the one outcome rule: not
    idempotent, so failed with the outcome unknown (never left `input_required` waiting for nobody)."""
    mcp = client(http_session, await server_process.start())
    task_id = await mcp.start_task("confirm_delete", {"filename": "gone.txt"})
    await mcp.wait_status(task_id, "input_required")
    await server_process.stop()
    await kill_tools(task_id)
    mcp = client(http_session, await server_process.start())
    done = await mcp.wait_status(task_id, "failed", "completed", "cancelled", timeout_s=15)
    assert done["status"] == "failed" and "outcome is unknown" in done["statusMessage"], done


async def test_a_graceful_stop_with_hand_over_off_stops_the_tool_and_applies_the_restart_rule(
    tmp_path: Path, http_session: aiohttp.ClientSession
) -> None:
    """`MCPTASKS_STOP_HANDS_OVER=false`: the stop ends the tool; a non-idempotent task fails with the
    outcome unknown and says the server was stopped."""
    server = ServerProcess(tmp_path / "data", MCPTASKS_STOP_HANDS_OVER="false")
    try:
        mcp = client(http_session, await server.start())
        task_id = await mcp.start_task("confirm_delete", {"filename": "x.txt"})
        await mcp.wait_status(task_id, "input_required")
        (pid,) = tool_pids(task_id)
        await server.stop()
        await exited(pid, timeout_s=10)
        mcp = client(http_session, await server.start())
        done = (await mcp.get(task_id)).result
        assert done["status"] == "failed" and "server was stopped" in done["statusMessage"], done
    finally:
        await server.stop()
