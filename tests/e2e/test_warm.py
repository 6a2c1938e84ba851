"""Warm workers on the embedded default (`spec.warm`): real worker processes of the test tools, a real
SQLite file and a real socket. A synchronous call costs no process start and no store write; a task
runs on a worker under the runner's lease; cancel, deadlines, lost workers and input keep their meaning.
Progress of a synchronous warm call: `test_input_rounds.test_progress_of_a_synchronous_call_streams_on_its_own_post`
(its conformance fixture is warm)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from mcp_tasks.protocol.models import TaskStatus
from mcp_tasks.runner import identity
from mcp_tasks.runner.warm_pool import WarmPool
from mcp_tasks.tasks.record import TaskRecord
from tests.conftest import PLAIN_CAPS, REPO, Embedded, McpHttp, exited, server_settings, serving, until

FORM_CAPS: dict[str, Any] = {"elicitation": {}}


def text_of(result: dict[str, Any]) -> str:
    return str(result["content"][0]["text"])


def pid_in(text: str) -> int:
    match = re.search(r"pid[= ](\d+)", text)
    assert match, text
    return int(match.group(1))


def pool(embedded: Embedded, tool: str) -> WarmPool:
    found = embedded.runner.pools.started[tool]
    assert isinstance(found, WarmPool)
    return found


async def test_synchronous_calls_share_one_warm_process_and_write_nothing(mcp: McpHttp, embedded: Embedded) -> None:
    """Two calls, one worker process (no process start per call), and not one task in the store."""
    first = (await mcp.call_tool("warm_echo", {"text": "one"}, caps=PLAIN_CAPS)).result
    second = (await mcp.call_tool("warm_echo", {"text": "two"}, caps=PLAIN_CAPS)).result
    assert text_of(first).startswith("one pid=") and "task=False" in text_of(first)
    assert pid_in(text_of(first)) == pid_in(text_of(second)) != os.getpid()
    assert [w.process.pid for w in pool(embedded, "warm_echo").workers] == [pid_in(text_of(first))]
    assert await embedded.store.count() == 0


async def test_the_example_word_stats_is_served_warm(mcp: McpHttp, embedded: Embedded) -> None:
    reply = (await mcp.call_tool("word_stats", {"text": "to be or not to be"})).result
    assert reply["resultType"] == "complete"
    assert reply["structuredContent"]["mostCommon"][0] == {"word": "to", "count": 2}
    assert pool(embedded, "word_stats").workers, "word_stats has minWorkers: 1"
    assert await embedded.store.count() == 0


async def test_a_task_runs_on_a_warm_worker_under_the_lease(mcp: McpHttp, embedded: Embedded) -> None:
    sync = text_of((await mcp.call_tool("warm_echo", {"text": "s"}, caps=PLAIN_CAPS)).result)
    task_id = await mcp.start_task("warm_echo", {"text": "t", "steps": 2})
    done = await mcp.wait_status(task_id, "completed", "failed")
    assert done["status"] == "completed", done
    assert "task=True" in text_of(done["result"])
    assert pid_in(text_of(done["result"])) == pid_in(sync)
    record = await embedded.store.get(task_id)
    assert record.progress is not None and record.progress["progress"] == 2  # progress events reached the task


async def test_a_warm_task_is_claimed_with_its_worker_named_in_the_lease(mcp: McpHttp, embedded: Embedded) -> None:
    """With a warm worker ready, the claim itself names the run's process (the worker's pid and identity, its
    endpoint, the execution id), so a restarted runner can re-attach to the call from its first moment on,
    and no write of the runner comes between the claim and the result (one fsynced commit fewer per task)."""
    worker = pid_in(text_of((await mcp.call_tool("warm_echo", {"text": "s"}, caps=PLAIN_CAPS)).result))
    writes: list[TaskRecord] = []
    forget = embedded.store.observe(lambda before, after: writes.append(after))
    try:
        task_id = await mcp.start_task("warm_echo", {"text": "t"})
        done = await mcp.wait_status(task_id, "completed", "failed")
    finally:
        forget()
    assert done["status"] == "completed", done
    assert pid_in(text_of(done["result"])) == worker
    mine = [record for record in writes if record.task_id == task_id]
    assert [record.lease is not None for record in mine] == [False, True, False], "create, claim, result"
    claimed = mine[1]
    assert claimed.lease is not None and claimed.lease.process is not None
    assert claimed.attempt == 1 and claimed.lease.holder == embedded.runner.ctx.holder
    process = claimed.lease.process
    assert (process.pid, process.execution_id) == (worker, f"{task_id}.1")
    assert process.identity == identity.of(worker) and process.warm_endpoint is not None
    assert process.warm_endpoint.endswith(f":{pool(embedded, 'warm_echo').workers[0].port}")
    assert mine[2].status is TaskStatus.COMPLETED


async def test_cancel_reaches_the_warm_call_and_the_worker_lives_on(mcp: McpHttp, embedded: Embedded) -> None:
    task_id = await mcp.start_task("warm_sleeper", {"seconds": 30})
    running = await mcp.wait_task(task_id, lambda t: "pid" in t.get("statusMessage", ""))
    worker_pid = pid_in(running["statusMessage"])
    await mcp.cancel(task_id)
    done = await mcp.wait_status(task_id, "cancelled", "completed", "failed")
    assert done["status"] == "cancelled"
    after = text_of((await mcp.call_tool("warm_sleeper", {"seconds": 0}, caps=PLAIN_CAPS)).result)
    assert pid_in(after) == worker_pid, "a cooperative cancel does not cost the worker"


async def test_a_call_deaf_to_its_cancel_costs_its_worker_after_the_grace(mcp: McpHttp, embedded: Embedded) -> None:
    task_id = await mcp.start_task("warm_deaf", {})
    running = await mcp.wait_task(task_id, lambda t: "pid" in t.get("statusMessage", ""))
    worker_pid = pid_in(running["statusMessage"])
    await mcp.cancel(task_id)
    done = await mcp.wait_status(task_id, "cancelled", "completed", "failed", timeout_s=15)
    assert done["status"] == "cancelled"
    await exited(worker_pid, timeout_s=10)  # the worker was stopped (by its executor, or itself past the grace)


async def test_a_worker_killed_mid_call_fails_a_task_whose_outcome_is_unknown(mcp: McpHttp, embedded: Embedded) -> None:
    task_id = await mcp.start_task("warm_sleeper", {"seconds": 30})
    running = await mcp.wait_task(task_id, lambda t: "pid" in t.get("statusMessage", ""))
    killed = pid_in(running["statusMessage"])
    os.kill(killed, signal.SIGKILL)
    done = await mcp.wait_status(task_id, "failed", "completed", "cancelled")
    assert done["status"] == "failed"
    assert "outcome is unknown" in done["statusMessage"]
    # the pool replaces the worker: the next call is served (the failure can be written before the pool has
    # dropped the dead worker; a call in that window meets its stale connection)
    await until(lambda: killed not in [w.process.pid for w in pool(embedded, "warm_sleeper").workers])
    assert "slept" in text_of((await mcp.call_tool("warm_sleeper", {"seconds": 0}, caps=PLAIN_CAPS)).result)


async def test_a_worker_killed_mid_call_reruns_an_idempotent_task(mcp: McpHttp) -> None:
    task_id = await mcp.start_task("warm_sleeper_idempotent", {"seconds": 1.5})
    running = await mcp.wait_task(task_id, lambda t: "attempt 1" in t.get("statusMessage", ""))
    os.kill(pid_in(running["statusMessage"]), signal.SIGKILL)
    done = await mcp.wait_status(task_id, "completed", "failed", "cancelled", timeout_s=20)
    assert done["status"] == "completed", done
    assert text_of(done["result"]).startswith("slept on attempt 2")


async def test_a_warm_task_past_its_run_time_is_stopped(mcp: McpHttp, embedded: Embedded) -> None:
    """warm_short_deadline (`maxRunTimeSeconds: 1`) never looks at its context: it is failed at its deadline,
    and its worker, which cannot stop the call inside Python, is replaced."""
    task_id = await mcp.start_task("warm_short_deadline", {})
    running = await mcp.wait_task(task_id, lambda t: "pid" in t.get("statusMessage", ""))
    done = await mcp.wait_status(task_id, "cancelled", "completed", "failed", timeout_s=10)
    assert done["status"] == "failed"
    assert "exceeded its maximum run time of 1s" in done["statusMessage"]
    stuck = pid_in(running["statusMessage"])
    await until(lambda: stuck not in [w.process.pid for w in pool(embedded, "warm_short_deadline").workers])


async def test_a_warm_task_asks_for_input_and_takes_the_answer(mcp: McpHttp) -> None:
    task_id = await mcp.start_task("warm_asker", {"seconds": 0})
    waiting = await mcp.wait_status(task_id, "input_required")
    (key,) = waiting["inputRequests"]
    await mcp.update(task_id, {key: {"action": "accept", "content": {"word": "warm"}}})
    done = await mcp.wait_status(task_id, "completed", "failed")
    assert text_of(done["result"]) == "worked on warm"


async def test_a_synchronous_warm_call_that_asks_continues_in_input_rounds(mcp: McpHttp, embedded: Embedded) -> None:
    """SEP-2322 on a warm worker: the run asks, becomes a hidden task held by the runner, and the
    caller's next round answers the same run (the worker is not restarted)."""
    first = (await mcp.call_tool("warm_asker", {"seconds": 0}, caps=FORM_CAPS)).result
    assert first["resultType"] == "input_required"
    (key,) = first["inputRequests"]
    answered = (
        await mcp.call_tool(
            "warm_asker",
            {"seconds": 0},
            caps=FORM_CAPS,
            extra={
                "inputResponses": {key: {"action": "accept", "content": {"word": "rounds"}}},
                "requestState": first["requestState"],
            },
        )
    ).result
    assert answered["resultType"] == "complete"
    assert text_of(answered) == "worked on rounds"
    assert await embedded.store.count() == 1  # the one hidden task


async def test_idle_workers_above_the_minimum_stop(mcp: McpHttp, embedded: Embedded) -> None:
    """warm_sleeper: `minWorkers: 0`, `idleTimeoutSeconds: 1`."""
    await mcp.call_tool("warm_sleeper", {"seconds": 0}, caps=PLAIN_CAPS)
    workers = pool(embedded, "warm_sleeper").workers
    assert len(workers) == 1
    pid = workers[0].process.pid
    await until(lambda: not pool(embedded, "warm_sleeper").workers)
    assert pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


async def test_events_a_tool_sends_after_its_call_ended_reach_no_other_call(mcp: McpHttp) -> None:
    """warm_late leaves a thread reporting after it returned; the kept-alive connection must stay clean."""
    for number in range(40):
        result = (await mcp.call_tool("warm_late", {"n": number}, caps=PLAIN_CAPS)).result
        assert text_of(result) == f"late {number}", result


async def test_workers_stopped_by_the_pool_do_not_count_as_failed_starts(mcp: McpHttp, embedded: Embedded) -> None:
    """warm_sleeper's idle worker is stopped after 1 s, five times over; every call is still served."""
    for _ in range(5):
        reply = (await mcp.call_tool("warm_sleeper", {"seconds": 0}, caps=PLAIN_CAPS)).result
        assert text_of(reply).startswith("slept"), reply
        await until(lambda: not pool(embedded, "warm_sleeper").workers)


async def test_a_tool_calling_sys_exit_ends_its_call_not_a_rerun_loop(mcp: McpHttp, embedded: Embedded) -> None:
    task_id = await mcp.start_task("warm_exit", {})
    done = await mcp.wait_status(task_id, "completed", "failed", "cancelled")
    assert done["status"] == "completed" and done["result"]["isError"] is True
    assert "sys.exit(3)" in text_of(done["result"])
    assert (await embedded.store.get(task_id)).attempt == 1


async def test_a_task_cancelled_while_it_waits_for_a_warm_slot_never_runs(mcp: McpHttp, embedded: Embedded) -> None:
    """warm_sleeper_idempotent has one worker taking one call; the second task waits, and is cancelled."""
    first = await mcp.start_task("warm_sleeper_idempotent", {"seconds": 3})
    await mcp.wait_task(first, lambda t: "pid" in t.get("statusMessage", ""))
    second = await mcp.start_task("warm_sleeper_idempotent", {"seconds": 0})

    async def started() -> bool:  # claimed by the runner: its run now waits for the worker's one slot
        return (await embedded.store.get(second)).attempt >= 1

    await until(started, changed=embedded.changed)
    await mcp.cancel(second)
    cancelled = await mcp.wait_status(second, "cancelled", "completed", "failed", timeout_s=5)
    assert cancelled["status"] == "cancelled"
    assert "pid" not in cancelled.get("statusMessage", ""), "it never ran"
    assert (await mcp.wait_status(first, "completed", "failed"))["status"] == "completed"


async def test_a_result_larger_than_a_stream_buffer_arrives_whole(mcp: McpHttp) -> None:
    """600 kB: over aiohttp's default line limit. Synchronously it is over the inline cap (a clear error);
    as a task it becomes an artifact, as a one-shot run's would."""
    text = "x" * 600_000
    sync = (await mcp.call_tool("warm_echo", {"text": text}, caps=PLAIN_CAPS)).result
    assert sync["isError"] is True and "too large for a synchronous call" in text_of(sync)
    task_id = await mcp.start_task("warm_echo", {"text": text})
    done = await mcp.wait_status(task_id, "completed", "failed")
    assert done["status"] == "completed" and done["result"]["content"][1]["type"] == "resource_link"


async def test_a_worker_started_through_a_wrapper_lives_on(tmp_path: Path) -> None:
    """`sh -c "python tools.py …"`: the shell, not the runner, is the worker's parent; it must not exit."""
    folder = tmp_path / "tools"
    folder.mkdir()
    manifest = {
        "apiVersion": "mcptasks.io/v1alpha1",
        "kind": "McpTool",
        "metadata": {"name": "wrapped"},
        "spec": {
            "name": "wrapped",
            "description": "warm_echo behind a shell",
            "inputSchema": {"type": "object"},
            "execution": {"taskPolicy": "never"},
            "container": {
                "command": ["sh", "-c", f"{sys.executable} tools.py warm_echo; exit $?"],
                "workingDir": str(REPO / "tests" / "tools"),
            },
            "warm": {"minWorkers": 1, "maxWorkers": 1},
        },
    }
    (folder / "wrapped.yaml").write_text(yaml.safe_dump(manifest))
    settings = server_settings(tmp_path / "data")
    settings = replace(settings, serve=replace(settings.serve, tools_dirs=(*settings.serve.tools_dirs, folder)))
    async with serving(settings) as server, aiohttp.ClientSession() as session:
        mcp = McpHttp(session, server.url)
        first = text_of((await mcp.call_tool("wrapped", {"text": "a"}, caps=PLAIN_CAPS)).result)
        # Stays: the worker's idle check of its parent runs on its own 2 s timer, in its own process; 2.5 s of
        # real time is the condition under test (the worker is still there afterwards).
        await asyncio.sleep(2.5)
        second = text_of((await mcp.call_tool("wrapped", {"text": "b"}, caps=PLAIN_CAPS)).result)
    assert pid_in(first) == pid_in(second)
