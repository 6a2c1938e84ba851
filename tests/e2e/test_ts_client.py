"""The official TypeScript client (`@modelcontextprotocol/client` 2.x on Node 22) against the embedded
server: in its default (legacy, `initialize`) mode every example tool is reached, `hello_world` through
an elicitation on the call's stream, a long call shows progress and is cancelled; in `auto` mode it
negotiates the modern era."""

from __future__ import annotations

from mcp_tasks.protocol.models import TaskStatus
from tests.clients import typescript
from tests.conftest import Embedded, until


async def test_the_typescript_client_in_its_default_mode_reaches_every_tool(embedded: Embedded) -> None:
    seen = await typescript.run(embedded.url, "legacy")
    assert seen["protocolVersion"] == "2025-11-25"
    assert {"greet", "hello_world", "count_primes", "word_stats", "divide", "purge_cache"} <= set(seen["tools"])
    assert seen["greet"] == {"text": "Hello, TS!", "isError": False}
    assert seen["hello"] == {"text": "Hello, Grace!", "isError": False}
    assert seen["asked"] == ["Please enter your name."]
    assert seen["sleeper"]["text"].startswith("slept 1.5s") and seen["progress"], seen
    assert seen["progress"] == sorted(set(seen["progress"]))
    assert "error" in seen["cancelled"] and seen["cancelledAfterMs"] < 10_000, seen
    rows = await embedded.store._w.execute_fetchall("SELECT task_id, tool FROM tasks WHERE tool = 'sleeper'")

    async def ended() -> list[TaskStatus] | None:  # the cancelled call's hidden task ends cancelled, cooperatively
        statuses = [(await embedded.store.get(row[0])).status for row in rows]
        return statuses if TaskStatus.CANCELLED in statuses else None

    statuses = await until(ended, changed=embedded.changed)
    assert sorted(s.value for s in statuses) == ["cancelled", "completed"], statuses


async def test_the_typescript_client_in_auto_mode_speaks_the_modern_era(embedded: Embedded) -> None:
    seen = await typescript.run(embedded.url, "auto")
    assert seen["protocolVersion"] == "2026-07-28"
    assert seen["greet"] == {"text": "Hello, TS!", "isError": False}
    # SEP-2322 input rounds: the client answers the InputRequiredResult with its elicitation handler
    assert seen["hello"] == {"text": "Hello, Grace!", "isError": False}, seen["hello"]
    assert seen["asked"] == ["Please enter your name."]
