"""Task lifetimes on the real control plane (gateway + operator + API server + process node): the same
rules the embedded tests check in tests/e2e, held by the operator's executors."""

from __future__ import annotations

import aiohttp

from tests.kube.conftest import Gateways, Operators, client

WAIT_S = 30.0


async def test_a_task_that_runs_past_its_ttl_is_readable_after_it_ends(
    gateways: Gateways, operators: Operators, http_session: aiohttp.ClientSession
) -> None:
    """Our rule (docs/design.md §11): a Job-run task longer than its `ttlMs` (1.5 s here; the operator's
    keep-alive writes at most every 30 s) ends readable for that `ttlMs` again, never already expired."""
    operators.start()
    mcp = client(http_session, await gateways.start())
    task_id = await mcp.start_task("short_ttl", {"seconds": 2.5})
    done = await mcp.wait_status(task_id, "completed", timeout_s=WAIT_S)
    assert done["ttlMs"] >= 2_500 + 1_500, done
    assert (await mcp.get(task_id)).result["status"] == "completed"
