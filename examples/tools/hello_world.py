"""hello_world: ask for input in the middle of a run (SEP-2663 example flow).

`ctx.elicit` issues an `elicitation/create` request (form mode) under the suggested key `name` and
blocks until the client answers: a task goes `input_required` until `tasks/update` brings e.g.
`{"inputResponses": {"name": {"action": "accept", "content": {"name": "Luca"}}}}`; a call without the
tasks extension gets an `InputRequiredResult` and its retry with `inputResponses` carries the answer.
Either way the run then completes with "Hello, Luca!". A client that did not declare `elicitation`
is never asked: `elicit` raises `ClientLacksCapability` and the greeting ends with a tool error.
"""

from __future__ import annotations

from mcp_tasks.runtime import ClientLacksCapability, ToolContext, ToolError, run


def main(ctx: ToolContext) -> str:
    try:
        answer = ctx.elicit("name", "Please enter your name.", {"name": {"type": "string"}})
    except ClientLacksCapability as exc:
        raise ToolError(f"No greeting, as the name cannot be asked: {exc}") from exc
    if answer.get("action") != "accept":
        raise ToolError(f"No greeting: the user chose {answer.get('action')!r} instead of entering a name")
    content = answer.get("content") or {}
    # The SEP's verbatim flow answers {"input": "Luca"} although the schema asks for "name"; accept both.
    name = content.get("name", content.get("input"))
    if not isinstance(name, str) or not name.strip():
        raise ToolError("No greeting: the answer did not contain a name")
    return f"Hello, {name.strip()}!"


if __name__ == "__main__":
    run(main)
