"""Fair share and limits in the embedded server (issue 33; docs/fair-share.md): our own policy, the spec
says nothing of how a server shares its slots or limits its callers.

Real parts: the embedded server on a socket, its SQLite file, the `gated` test tool as real processes (a
run ends when the test opens its gate, so ordering is asserted on state, never on time), bearer tokens of
two tenants (`acme`: alice, bob; `evil`: eve), and the official `mcp` SDK client for the 429.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import jsonrpc

from mcp_tasks.cli.settings import Settings
from mcp_tasks.client import TasksClientExtension
from mcp_tasks.observability.endpoint import start_metrics_server
from mcp_tasks.tasks import fair_share
from mcp_tasks.tasks.limits import LimitSettings, TenantOverrides
from tests.conftest import PLAIN_CAPS, Embedded, McpHttp, server_settings, serving, until, with_tokens
from tests.metrics import Samples, scrape, value


def limited(tmp_path: Path, limits: LimitSettings, **runner: Any) -> Settings:
    settings = with_tokens(server_settings(tmp_path / "data", **runner), tmp_path)
    return replace(settings, limits=limits)


@contextlib.asynccontextmanager
async def clients(server: Embedded) -> AsyncIterator[tuple[McpHttp, McpHttp, McpHttp]]:
    """alice and bob (tenant acme) and eve (tenant evil), raw MCP clients."""
    async with aiohttp.ClientSession() as session:
        yield tuple(  # type: ignore[misc]
            McpHttp(session, server.url, token, changed=server.changed)
            for token in ("alice-token", "bob-token", "eve-token")
        )


async def leased(server: Embedded, task_id: str) -> bool:
    return (await server.store.get(task_id)).lease is not None


async def until_leased(server: Embedded, task_id: str) -> None:
    await until(lambda: leased(server, task_id), changed=server.changed)


async def open_gate(gate: Path, client: McpHttp, task_id: str) -> None:
    gate.touch()
    await client.wait_status(task_id, "completed")


async def test_one_tenants_backlog_delays_anothers_task_by_at_most_one_slot_turnover(tmp_path: Path) -> None:
    """Issue 33's 8-against-1 scenario with `MCPTASKS_MAX_CONCURRENT_TASKS=2`: acme's eight tasks fill both
    slots and queue six; evil's one task, created after, is the next to start when a slot frees, before any
    of acme's six; the queued tasks say so, counting only their own tenant's tasks."""
    async with (
        serving(limited(tmp_path, LimitSettings(), max_concurrent_tasks=2)) as server,
        clients(server) as (
            alice,
            _bob,
            eve,
        ),
    ):
        gates = [tmp_path / f"gate-a{i}" for i in range(8)]
        mine = [await alice.start_task("gated", {"gate": str(gate)}) for gate in gates]
        await until(lambda: _all_leased(server, mine[:2]), changed=server.changed)
        b_gate = tmp_path / "gate-b"
        theirs = await eve.start_task("gated", {"gate": str(b_gate)})

        queued = (await eve.get(theirs)).result
        assert queued["status"] == "working"
        assert queued["statusMessage"] == "queued: next in line for a slot"  # acme's six are not "ahead" of it
        last = (await alice.get(mine[7])).result
        assert last["statusMessage"] == "queued: 5 of your tenant's tasks ahead"

        await open_gate(gates[0], alice, mine[0])  # one slot's turnover
        await until_leased(server, theirs)
        assert [await leased(server, task_id) for task_id in mine[2:]] == [False] * 6  # none of acme's went first
        assert (await alice.get(mine[2])).result["statusMessage"].startswith(fair_share.QUEUED_PREFIX)

        await open_gate(b_gate, eve, theirs)
        await until_leased(server, mine[2])  # then acme's oldest waiting task
        for gate, task_id in zip(gates[1:], mine[1:], strict=True):
            await open_gate(gate, alice, task_id)


async def _all_leased(server: Embedded, task_ids: list[str]) -> bool:
    return all([await leased(server, task_id) for task_id in task_ids])


async def test_a_tenant_at_its_running_budget_waits_while_slots_stay_free_for_others(tmp_path: Path) -> None:
    """`max_running_per_tenant` (acme overridden to 1): acme's second task stays queued, saying it waits
    for its tenant's budget, although the executor has free slots; evil's task runs at once."""
    limits = LimitSettings(
        max_running_per_tenant=4, tenant_limits=TenantOverrides({"acme": {"max_running_per_tenant": 1}})
    )
    async with (
        serving(limited(tmp_path, limits, max_concurrent_tasks=4)) as server,
        clients(server) as (
            alice,
            bob,
            eve,
        ),
    ):
        first = await alice.start_task("gated", {"gate": str(tmp_path / "a1")})
        await until_leased(server, first)
        second = await bob.start_task("gated", {"gate": str(tmp_path / "a2")})  # same tenant, another principal
        theirs = await eve.start_task("gated", {"gate": str(tmp_path / "b1")})
        await until_leased(server, theirs)
        assert not await leased(server, second)
        assert (await bob.get(second)).result["statusMessage"] == (
            "queued: next in line for a slot; your tenant is at its limit of running tasks (max_running_per_tenant)"
        )
        await open_gate(tmp_path / "a1", alice, first)
        await until_leased(server, second)
        await open_gate(tmp_path / "a2", bob, second)
        await open_gate(tmp_path / "b1", eve, theirs)


async def test_a_principal_over_its_unfinished_quota_is_refused_with_nothing_stored_and_across_a_restart(
    tmp_path: Path,
) -> None:
    """`max_unfinished_per_principal` = 2: the third `tools/call` is HTTP 429, -32603 with `data.limit`
    naming the quota and no `retryAfterMs`, and no task is stored; the count comes from the task store, so
    a restarted server refuses too; another principal is not affected; a finished task makes room."""
    settings = limited(tmp_path, LimitSettings(max_unfinished_per_principal=2), max_concurrent_tasks=1)
    async with serving(settings) as server, clients(server) as (alice, bob, _eve):
        blocker = await bob.start_task("gated", {"gate": str(tmp_path / "b0")})  # holds the one slot
        await until_leased(server, blocker)
        held = [await alice.start_task("gated", {"gate": str(tmp_path / f"g{i}")}) for i in range(2)]
        stored = await server.store.count()
        refused = await alice.call_tool("gated", {"gate": str(tmp_path / "g3")})
        assert refused.status == 429
        assert refused.error["code"] == jsonrpc.INTERNAL_ERROR
        assert refused.error["data"] == {"limit": "max_unfinished_per_principal", "maximum": 2}
        assert "Retry-After" not in refused.headers
        assert await server.store.count() == stored
        other = await bob.start_task("gated", {"gate": str(tmp_path / "b1")})

    async with serving(settings) as server, clients(server) as (alice, bob, _eve):  # alice's two still queued
        again = await alice.call_tool("gated", {"gate": str(tmp_path / "g5")})
        assert again.status == 429 and again.error["data"]["limit"] == "max_unfinished_per_principal"
        await open_gate(tmp_path / "g0", alice, held[0])  # a finished task makes room
        made = await alice.start_task("gated", {"gate": str(tmp_path / "g6")})
        for name in ("g1", "g6", "b1"):
            (tmp_path / name).touch()
        for client, task_id in ((alice, held[1]), (alice, made), (bob, other)):
            await client.wait_status(task_id, "completed")


async def test_a_synchronous_call_counts_against_the_running_budget(tmp_path: Path) -> None:
    """A synchronous call cannot queue: over `max_running_per_principal` it is refused (429, `Retry-After`,
    `data.retryAfterMs`) while the principal's task runs; another principal's call runs."""
    settings = limited(tmp_path, LimitSettings(max_running_per_principal=1))
    async with serving(settings) as server, clients(server) as (alice, bob, _eve):
        running = await alice.start_task("gated", {"gate": str(tmp_path / "g")})
        await until_leased(server, running)
        refused = await alice.call_tool("greet", {"name": "A"})
        assert refused.status == 429, refused.body
        assert refused.error["data"]["limit"] == "max_running_per_principal"
        assert refused.error["data"]["retryAfterMs"] == 1000 and refused.headers["Retry-After"] == "1"
        # greet is never a task: no advice to call it as one; a tool that can be one gets that advice
        assert "tasks extension" not in refused.error["message"], refused.error
        can_queue = await alice.call_tool("sleeper", {"seconds": 0}, caps=PLAIN_CAPS)
        assert can_queue.status == 429 and "tasks extension to wait in the queue" in can_queue.error["message"]
        assert (await bob.call_tool("greet", {"name": "B"})).result["content"][0]["text"] == "Hello, B!"
        await open_gate(tmp_path / "g", alice, running)
        assert (await alice.call_tool("greet", {"name": "A"})).result["content"][0]["text"] == "Hello, A!"


async def test_the_creation_rate_answers_429_with_retry_after_through_the_official_sdk(tmp_path: Path) -> None:
    """`task_create_rate_per_principal` with a burst of 1: the SDK client's second task creation raises
    `MCPError` -32603 whose `data` carries `retryAfterMs` and the limit; the response was HTTP 429 with
    `Retry-After`; nothing was stored for it; another principal still creates."""
    limits = LimitSettings(task_create_rate_per_principal=0.01, task_create_burst_per_principal=1)
    seen: list[httpx2.Response] = []

    async def record(response: httpx2.Response) -> None:
        seen.append(response)

    async with serving(limited(tmp_path, limits)) as server:
        async with (
            httpx2.AsyncClient(
                headers={"Authorization": "Bearer alice-token"}, timeout=30, event_hooks={"response": [record]}
            ) as http,
            Client(
                streamable_http_client(server.url, http_client=http), extensions=[TasksClientExtension()], cache=None
            ) as client,
        ):
            created = await client.call_tool("sleeper", {"seconds": 0})
            assert created is not None
            stored = await server.store.count()
            with pytest.raises(MCPError) as raised:
                await client.call_tool("sleeper", {"seconds": 0})
        error = raised.value.error
        assert error.code == jsonrpc.INTERNAL_ERROR
        assert error.data["limit"] == "task_create_rate_per_principal"
        assert 0 < error.data["retryAfterMs"] <= 100_000
        refusal = next(response for response in seen if response.status_code == 429)
        assert int(refusal.headers["Retry-After"]) == -(-error.data["retryAfterMs"] // 1000)
        assert await server.store.count() == stored
        async with clients(server) as (_alice, bob, _eve):
            assert (await bob.call_tool("sleeper", {"seconds": 0})).status == 200


async def test_queues_refusals_and_fast_polls_are_counted_with_bounded_tenant_labels(tmp_path: Path) -> None:
    """Metrics (docs/operations.md): queued and running tasks by tenant each sweep, refusals by the limit
    that refused, `tasks/get` sooner than `pollIntervalMs`; a tenant gets its own label only when listed
    (`MCPTASKS_METRICS_TENANTS`), every other one is `other`."""
    limits = LimitSettings(max_unfinished_per_principal=2, metrics_tenants=frozenset({"acme"}))
    runner, port = await start_metrics_server("127.0.0.1", 0)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        async with (
            serving(limited(tmp_path, limits, max_concurrent_tasks=1)) as server,
            clients(server) as (
                alice,
                _bob,
                eve,
            ),
        ):
            before = await scrape(alice.session, url)
            running = await alice.start_task("gated", {"gate": str(tmp_path / "a")})
            await until_leased(server, running)
            queued = await eve.start_task("gated", {"gate": str(tmp_path / "e")})
            await eve.start_task("gated", {"gate": str(tmp_path / "e2")})
            assert (await eve.call_tool("gated", {"gate": str(tmp_path / "e3")})).status == 429
            await eve.get(queued)
            await eve.get(queued)  # at once: sooner than its pollIntervalMs (1000 ms)

            def counted(samples: Samples) -> bool:
                return (
                    value(samples, "mcptasks_tasks_queued", tenant="other") == 2
                    and value(samples, "mcptasks_tasks_running", tenant="acme") == 1
                )

            during = await until(lambda: _scraped(alice.session, url, counted))
            assert value(during, "mcptasks_tasks_queued", tenant="acme") == 0
            assert not [labels for name, labels, _ in _series(during) if "evil" in labels.values()]
            refusals = "mcptasks_limit_refusals_total"
            assert (
                value(during, refusals, limit="max_unfinished_per_principal", tenant="other")
                - value(before, refusals, limit="max_unfinished_per_principal", tenant="other")
                == 1
            )
            fast = value(during, "mcptasks_fast_polls_total", tenant="other")
            assert fast - value(before, "mcptasks_fast_polls_total", tenant="other") >= 1
            await open_gate(tmp_path / "a", alice, running)
    finally:
        await runner.cleanup()


async def _scraped(session: aiohttp.ClientSession, url: str, holds: Any) -> Samples | None:
    samples = await scrape(session, url)
    return samples if holds(samples) else None


def _series(samples: Samples) -> list[tuple[str, dict[str, str], float]]:
    return [(name, dict(labels), number) for (name, labels), number in samples.items()]


async def test_concurrent_calls_of_one_principal_cannot_pass_its_quota_together(tmp_path: Path) -> None:
    """Six `tools/call` of one principal at once against a quota of 2: exactly two tasks are stored, four
    refused (the quota's count and the create hold one lock per principal on a replica)."""
    settings = limited(tmp_path, LimitSettings(max_unfinished_per_principal=2), max_concurrent_tasks=1)
    async with serving(settings) as server, clients(server) as (alice, _bob, _eve):
        replies = await asyncio.gather(*(alice.call_tool("gated", {"gate": str(tmp_path / f"g{i}")}) for i in range(6)))
        assert sorted(reply.status for reply in replies) == [200, 200, 429, 429, 429, 429]
        assert await server.store.count() == 2
        for i, reply in enumerate(replies):
            if reply.status == 200:
                (tmp_path / f"g{i}").touch()
                await alice.wait_status(reply.result["taskId"], "completed")


async def test_a_queued_task_cancelled_while_every_slot_is_busy_ends_without_waiting_for_a_slot(
    tmp_path: Path,
) -> None:
    """Our choice: a cancel of a task that never ran needs no slot, so it settles `cancelled` while the one
    slot stays busy (before, it waited for the slot and said `queued:` meanwhile)."""
    async with (
        serving(limited(tmp_path, LimitSettings(), max_concurrent_tasks=1)) as server,
        clients(server) as (
            alice,
            _bob,
            _eve,
        ),
    ):
        running = await alice.start_task("gated", {"gate": str(tmp_path / "a")})
        await until_leased(server, running)
        queued = await alice.start_task("gated", {"gate": str(tmp_path / "b")})
        assert (await alice.cancel(queued)).status == 200
        done = await alice.wait_status(queued, "cancelled")
        assert done["status"] == "cancelled"
        assert (await alice.get(running)).result["status"] == "working"
        await open_gate(tmp_path / "a", alice, running)


async def test_a_call_handed_off_to_a_task_is_held_to_the_same_quota(tmp_path: Path) -> None:
    """A host without the tasks extension gets tasks through the handoff (docs/handoff.md): the quota
    applies to them too, 429 and nothing stored, so it cannot be bypassed by leaving the extension out."""
    settings = limited(tmp_path, LimitSettings(max_unfinished_per_principal=1), max_concurrent_tasks=1)
    settings = replace(settings, gateway=replace(settings.gateway, handoff_default=True))
    async with serving(settings) as server, clients(server) as (alice, _bob, _eve):
        first = await alice.call_tool("gated", {"gate": str(tmp_path / "a")}, caps=PLAIN_CAPS)
        assert first.status == 200 and "taskId" in str(first.result), first.body
        refused = await alice.call_tool("gated", {"gate": str(tmp_path / "b")}, caps=PLAIN_CAPS)
        assert refused.status == 429 and refused.error["data"]["limit"] == "max_unfinished_per_principal"
        assert await server.store.count() == 1
        (tmp_path / "a").touch()


async def test_a_legacy_era_call_is_held_to_the_same_quota(tmp_path: Path) -> None:
    """A legacy-era (2025-11-25) `tools/call` of a task-capable tool runs as a hidden task its caller waits
    on: it is a task all the same, so the quota holds it (else a client could bypass the quota by speaking
    the older version): the refusal is the same JSON-RPC error, with HTTP 200 as every legacy-era error,
    and nothing is stored."""
    settings = limited(tmp_path, LimitSettings(max_unfinished_per_principal=1), max_concurrent_tasks=1)
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25",
        "Authorization": "Bearer alice-token",
    }

    def call(request_id: int, gate: str) -> dict[str, Any]:
        params = {"name": "gated", "arguments": {"gate": str(tmp_path / gate)}}
        return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}

    async with serving(settings) as server, aiohttp.ClientSession() as session:
        first = await session.post(server.url, json=call(1, "a"), headers=headers)
        assert first.content_type == "text/event-stream"
        await until(lambda: _stored(server, 1), changed=server.changed)
        async with session.post(server.url, json=call(2, "b"), headers=headers) as refused:
            assert refused.status == 200 and refused.content_type == "application/json"
            error = (await refused.json())["error"]
        assert error["code"] == jsonrpc.INTERNAL_ERROR
        assert error["data"] == {"limit": "max_unfinished_per_principal", "maximum": 1}
        assert await server.store.count() == 1
        (tmp_path / "a").touch()
        async with first:
            text = await first.text()
        assert '"id":1' in text.replace(" ", "") and '"isError":true' not in text.replace(" ", ""), text


async def _stored(server: Embedded, count: int) -> bool:
    return await server.store.count() == count


ASK_CAPS: dict[str, Any] = {"elicitation": {}}


async def test_a_synchronous_call_that_asks_for_input_is_held_to_the_quota(tmp_path: Path) -> None:
    """A synchronous call whose tool asks for input becomes a hidden task (SEP-2322 rounds): one more
    unfinished task of its caller, so over `max_unfinished_per_principal` the call answers the quota's
    429 error, as a task-augmented call would, and nothing is stored; another principal still asks."""
    settings = limited(tmp_path, LimitSettings(max_unfinished_per_principal=1), max_concurrent_tasks=1)
    async with serving(settings) as server, clients(server) as (alice, bob, _eve):
        held = await alice.start_task("gated", {"gate": str(tmp_path / "a")})
        refused = await alice.call_tool("asker", {}, caps=ASK_CAPS)
        assert refused.status == 429, refused.body
        assert refused.error["data"] == {"limit": "max_unfinished_per_principal", "maximum": 1}
        assert "asked for input" in refused.error["message"]
        assert await server.store.count() == 1
        assert (await bob.call_tool("asker", {}, caps=ASK_CAPS)).result["resultType"] == "input_required"
        await open_gate(tmp_path / "a", alice, held)
        assert (await alice.call_tool("asker", {}, caps=ASK_CAPS)).result["resultType"] == "input_required"


async def test_calls_waiting_for_input_are_shared_between_tenants_and_refusals_reveal_no_counts(
    tmp_path: Path,
) -> None:
    """`MCPTASKS_MAX_INPUT_ROUNDS` = 3: a tenant may hold at most 2 (half, rounded up) parked calls, so
    acme (alice, bob) cannot take evil's place; once all 3 are taken the refusal names no count of
    anyone's; a call that asks for a kind of input its client did not declare gets that refusal first."""
    settings = limited(tmp_path, LimitSettings(), max_input_rounds=3)
    async with serving(settings) as server, clients(server) as (alice, bob, eve):
        for client in (alice, bob):
            assert (await client.call_tool("asker", {}, caps=ASK_CAPS)).result["resultType"] == "input_required"
        over_share = (await alice.call_tool("asker", {}, caps=ASK_CAPS)).result
        assert over_share["isError"] is True and "your tenant holds its share" in over_share["content"][0]["text"]
        assert (await eve.call_tool("asker", {}, caps=ASK_CAPS)).result["resultType"] == "input_required"
        full = (await eve.call_tool("asker", {}, caps=ASK_CAPS)).result
        text = full["content"][0]["text"]
        assert full["isError"] is True and "too many synchronous calls waiting" in text, text
        assert not re.search(r"\d", text.replace("MCPTASKS_MAX_INPUT_ROUNDS", "")), text
        undeclared = (await eve.call_tool("asker", {}, caps=PLAIN_CAPS)).result
        assert "'elicitation'" in undeclared["content"][0]["text"], undeclared
        assert "MCPTASKS_MAX_INPUT_ROUNDS" not in undeclared["content"][0]["text"]
