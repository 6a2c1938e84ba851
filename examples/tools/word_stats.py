"""word_stats: a fast, deterministic synchronous tool (`taskPolicy: never`).

The same helper serves synchronous runs: `run(main)` posts the returned `CallToolResult` and the
gateway answers the `tools/call` with it directly. Words are maximal runs of letters, digits,
apostrophes and hyphens, compared case-insensitively; ties in the top five keep first-seen order.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from mcp_tasks.runtime import ToolContext, run

WORD = re.compile(r"[^\W_]+(?:['\u2019-][^\W_]+)*")
TOP = 5


def stats(text: str) -> dict[str, Any]:
    """`{characters, words, lines, mostCommon: [{word, count}]}` for `text`."""
    words = [word.casefold() for word in WORD.findall(text)]
    return {
        "characters": len(text),
        "words": len(words),
        "lines": len(text.splitlines()),
        "mostCommon": [{"word": word, "count": count} for word, count in Counter(words).most_common(TOP)],
    }


def main(ctx: ToolContext) -> dict[str, Any]:
    summary = stats(ctx.arguments["text"])
    common = ", ".join(f"{item['word']} ({item['count']})" for item in summary["mostCommon"]) or "none"
    text = (
        f"Characters: {summary['characters']}, words: {summary['words']}, lines: {summary['lines']}. "
        f"Most common words: {common}."
    )
    return {"content": [{"type": "text", "text": text}], "structuredContent": summary}


if __name__ == "__main__":
    run(main)
