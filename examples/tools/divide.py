"""divide: finish with a tool error (`ToolError` → `completed` with `isError: true`, SEP-1303).

A tool error is part of the tool's answer, not a failure of the call: the task still ends
`completed`, and its result carries the message with `isError: true`. Contrast `ProtocolFailure`,
which ends the task `failed` with a JSON-RPC error.
"""

from __future__ import annotations

from mcp_tasks.runtime import ToolContext, ToolError, run


def main(ctx: ToolContext) -> str:
    dividend = ctx.arguments["dividend"]
    divisor = ctx.arguments["divisor"]
    if divisor == 0:
        raise ToolError(f"Cannot divide by zero: {dividend} / {divisor} is undefined; use a non-zero divisor")
    try:
        quotient = dividend / divisor
    except OverflowError as exc:  # huge JSON integers do not fit a float
        raise ToolError(f"Cannot divide {dividend} by {divisor}: {exc}") from exc
    return f"{dividend} / {divisor} = {quotient!r}"


if __name__ == "__main__":
    run(main)
