"""Bench-only tool of bench.fairness (`fairness_tools.yaml`): sleeps `seconds`, then answers."""

from __future__ import annotations

import time

from mcp_tasks.runtime import ToolContext, run


def sleep(ctx: ToolContext) -> str:
    seconds = float(ctx.arguments.get("seconds", 0))
    time.sleep(seconds)
    return f"slept {seconds:g}s"


if __name__ == "__main__":
    run(sleep)
