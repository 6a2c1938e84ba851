"""The conformance suite's tool fixtures (conformance.md §5), one process per call: `fixtures.py <tool>`."""

from __future__ import annotations

import sys
import time

from mcp_tasks.runtime import ProtocolFailure, ToolContext, ToolError, run


def simple_text(ctx: ToolContext) -> str:
    return "This is a simple text response for testing."


def error_handling(ctx: ToolContext) -> str:
    raise ToolError("This tool intentionally returns an error for testing")


def missing_capability(ctx: ToolContext) -> str:
    return "Success"


def streaming_elicitation(ctx: ToolContext) -> str:
    return "Streaming complete"


def logging_tool(ctx: ToolContext) -> str:
    return "Logging tool complete"


def greet(ctx: ToolContext) -> str:
    return f"Hello, {ctx.arguments['name']}!"


def slow_compute(ctx: ToolContext) -> str:
    seconds = float(ctx.arguments.get("seconds", 0))
    label = ctx.arguments.get("label", "job")
    start = time.monotonic()
    while (elapsed := time.monotonic() - start) < seconds:
        ctx.report(f"{label}: {elapsed:.1f}s of {seconds:g}s")
        time.sleep(min(0.2, seconds - elapsed))
    return f"Computed {label} in {seconds:g}s"


def failing_job(ctx: ToolContext) -> str:
    time.sleep(0.3)
    raise ToolError("failing_job failed as designed")


def protocol_error_job(ctx: ToolContext) -> str:
    raise ProtocolFailure("protocol_error_job hit an internal error as designed", code=-32603)


def confirm_delete(ctx: ToolContext) -> str:
    filename = ctx.arguments["filename"]
    answer = ctx.elicit("confirm", f"Delete {filename}?", {"confirm": {"type": "boolean"}})
    if answer.get("action") == "accept" and (answer.get("content") or {}).get("confirm") is True:
        return f"Deleted {filename}"
    return f"Kept {filename}"


def multi_input(ctx: ToolContext) -> str:
    answers = ctx.ask(
        {
            "name": {
                "method": "elicitation/create",
                "params": {
                    "message": "Your name?",
                    "requestedSchema": {
                        "type": "object",
                        "properties": {"name": {"type": "string"}},
                        "required": ["name"],
                    },
                },
            },
            "confirm": {
                "method": "elicitation/create",
                "params": {
                    "message": "Proceed?",
                    "requestedSchema": {
                        "type": "object",
                        "properties": {"confirm": {"type": "boolean"}},
                        "required": ["confirm"],
                    },
                },
            },
        }
    )
    name = (answers["name"].get("content") or {}).get("name")
    return f"Received {name} and {answers['confirm'].get('action')}"


def tool_with_task(ctx: ToolContext) -> str:
    name = (ctx.input_responses.get("user_name", {}).get("content") or {}).get("name", "stranger")
    return f"Hello, {name}!"


TOOLS = {
    "test_simple_text": simple_text,
    "test_error_handling": error_handling,
    "test_missing_capability": missing_capability,
    "test_streaming_elicitation": streaming_elicitation,
    "test_logging_tool": logging_tool,
    "greet": greet,
    "slow_compute": slow_compute,
    "failing_job": failing_job,
    "protocol_error_job": protocol_error_job,
    "confirm_delete": confirm_delete,
    "multi_input": multi_input,
    "test_tool_with_task": tool_with_task,
}

if __name__ == "__main__":
    run(TOOLS[sys.argv[1]])
