"""The conformance suite's tool fixtures (conformance.md §5), one process per call: `fixtures.py <tool>`."""

from __future__ import annotations

import io
import json
import struct
import sys
import time
import wave
import zlib

from mcp_tasks.runtime import ClientLacksCapability, ProtocolFailure, ToolContext, ToolError, content, run


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


def tool_with_progress(ctx: ToolContext) -> str:
    for done in (0, 50, 100):
        ctx.progress(done, 100, f"{done}% done")
        if done < 100:
            time.sleep(0.05)
    return "Progress complete"


def json_schema_2020_12(ctx: ToolContext) -> str:
    return json.dumps(ctx.arguments, sort_keys=True)


def custom_header(ctx: ToolContext) -> str:
    return f"value: {ctx.arguments['value']}"


def _png() -> bytes:
    """A 1x1 red PNG, built with the standard library."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00"))
        + chunk(b"IEND", b"")
    )


def _wav() -> bytes:
    """A tenth of a second of silence, 8 kHz mono, as WAV."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(8000)
        out.writeframes(b"\x00\x00" * 800)
    return buffer.getvalue()


def image_content(ctx: ToolContext) -> dict[str, object]:
    return {"content": [content.image(_png(), "image/png")]}


def audio_content(ctx: ToolContext) -> dict[str, object]:
    return {"content": [content.audio(_wav(), "audio/wav")]}


def embedded_resource(ctx: ToolContext) -> dict[str, object]:
    resource = content.embedded_text("test://embedded-resource", "This is an embedded resource content.")
    return {"content": [resource]}


def multiple_content_types(ctx: ToolContext) -> dict[str, object]:
    data = json.dumps({"test": "data", "value": 123})
    return {
        "content": [
            content.text("Multiple content types test:"),
            content.image(_png(), "image/png"),
            content.embedded_text("test://mixed-content-resource", data, "application/json"),
        ]
    }


def _name(answer: dict[str, object]) -> object:
    return (answer.get("content") or {}).get("name")  # type: ignore[union-attr]


def irr_elicitation(ctx: ToolContext) -> str:
    answer = ctx.elicit("user_name", "What is your name?", {"name": {"type": "string"}})
    return f"Hello, {_name(answer)}!"


def _question(text: str) -> list[dict[str, object]]:
    return [{"role": "user", "content": {"type": "text", "text": text}}]


def _sampling(text: str, max_tokens: int) -> dict[str, object]:
    return content.sampling_request(_question(text), max_tokens)


def _sampled_text(answer: dict[str, object]) -> object:
    return (answer.get("content") or {}).get("text")  # type: ignore[union-attr]


def irr_sampling(ctx: ToolContext) -> str:
    answer = ctx.sample("capital_question", _question("What is the capital of France?"), 100)
    return f"The model said: {_sampled_text(answer)}"


def irr_list_roots(ctx: ToolContext) -> str:
    roots = ctx.list_roots("client_roots")
    return f"Found {len(roots)} root(s)"


def irr_request_state(ctx: ToolContext) -> str:
    answer = ctx.elicit("confirm", "Confirm to continue", {"ok": {"type": "boolean"}})
    ok = (answer.get("content") or {}).get("ok") is True
    return "state-ok: confirmed" if ok else "state-ok: not confirmed"


def irr_multiple_inputs(ctx: ToolContext) -> str:
    answers = ctx.ask(
        {
            "name": content.form_request("What is your name?", {"name": {"type": "string"}}),
            "greeting": _sampling("Generate a greeting", 50),
            "roots": content.roots_request(),
        }
    )
    roots = answers["roots"].get("roots") or []
    return f"Hello, {_name(answers['name'])}! {_sampled_text(answers['greeting'])} ({len(roots)} root(s))"


def irr_multi_round(ctx: ToolContext) -> str:
    name = _name(ctx.elicit("step1", "What is your name?", {"name": {"type": "string"}}))
    color = (
        ctx.elicit("step2", f"Hello {name}, what is your favourite colour?", {"color": {"type": "string"}}).get(
            "content"
        )
        or {}
    ).get("color")
    return f"{name} likes {color}"


def irr_capabilities(ctx: ToolContext) -> str:
    """Asks for what the client declared: elicitation and sampling, or whichever of them it has."""
    requests = {
        "user_name": content.form_request("What is your name?", {"name": {"type": "string"}}),
        "capital_question": _sampling("What is the capital of France?", 100),
    }
    kinds = {"user_name": "elicitation", "capital_question": "sampling"}
    while requests:
        try:
            answers = ctx.ask(requests)
        except ClientLacksCapability as exc:
            missing = (exc.capability or "").split(".")[0]
            requests = {key: request for key, request in requests.items() if kinds[key] != missing}
            if len(requests) == len(kinds) or not missing:
                raise
            continue
        return f"Answered: {', '.join(sorted(answers))}"
    return "The client declared neither elicitation nor sampling, so nothing could be asked"


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
    "test_tool_with_progress": tool_with_progress,
    "json_schema_2020_12_tool": json_schema_2020_12,
    "test_custom_header": custom_header,
    "test_image_content": image_content,
    "test_audio_content": audio_content,
    "test_embedded_resource": embedded_resource,
    "test_multiple_content_types": multiple_content_types,
    "test_input_required_result_elicitation": irr_elicitation,
    "test_input_required_result_sampling": irr_sampling,
    "test_input_required_result_list_roots": irr_list_roots,
    "test_input_required_result_request_state": irr_request_state,
    "test_input_required_result_multiple_inputs": irr_multiple_inputs,
    "test_input_required_result_multi_round": irr_multi_round,
    "test_input_required_result_tampered_state": irr_request_state,
    "test_input_required_result_capabilities": irr_capabilities,
}

if __name__ == "__main__":
    run(TOOLS[sys.argv[1]])
