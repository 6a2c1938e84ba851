"""purge_cache: act on an answer given before the task was created (`inputBeforeTask`).

The gateway collected the `confirm` answer (an `ElicitResult` `{action, content}`) before creating
the task; it arrives in `ctx.input_responses`, and a declined or cancelled request never reaches the
tool. To stay harmless, this example "purges" a scratch cache it fills itself:
`<temp dir>/mcp-tasks-example-cache/<prefix>-entry-NNN`. It only ever deletes regular files directly
inside that folder, and reports progress while it works.
"""

from __future__ import annotations

import re
import tempfile
import time
from pathlib import Path

from mcp_tasks.runtime import ToolContext, ToolError, run

CACHE_DIR = Path(tempfile.gettempdir()) / "mcp-tasks-example-cache"
PREFIX = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # same as the inputSchema: no separators, no dots
SEEDED_ENTRIES = 40
SECONDS_PER_ENTRY = 0.05  # simulated cost of an eviction, so the run is long enough to watch


def seed(prefix: str) -> None:
    """Fill the scratch cache with entries to purge (a real tool would find them already there)."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    for n in range(SEEDED_ENTRIES):
        (CACHE_DIR / f"{prefix}-entry-{n:03d}").write_bytes(b"cached value\n")


def main(ctx: ToolContext) -> str:
    prefix = ctx.arguments["prefix"]
    if not PREFIX.match(prefix):
        raise ToolError("prefix must be 1-64 letters, digits, '_' or '-'")
    answer = ctx.input_responses.get("confirm") or {}
    if answer.get("action") != "accept" or (answer.get("content") or {}).get("confirm") is not True:
        return "Nothing purged: not confirmed"

    seed(prefix)
    entries = sorted(
        path
        for path in CACHE_DIR.iterdir()
        if path.name.startswith(prefix) and path.is_file() and not path.is_symlink()
    )
    for done, path in enumerate(entries, start=1):
        path.unlink(missing_ok=True)
        time.sleep(SECONDS_PER_ENTRY)
        if done % 10 == 0 or done == len(entries):
            ctx.report(f"purged {done} of {len(entries)} entries")
    return f"Purged {len(entries)} cache entries starting with {prefix!r} from {CACHE_DIR}"


if __name__ == "__main__":
    run(main)
