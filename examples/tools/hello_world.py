"""hello_world: ask for input in the middle of a task (SEP-2663 example flow).

`ctx.elicit` issues an `elicitation/create` request (form mode) under the suggested key `name`; the
task goes `input_required` and the call blocks until the client answers it with `tasks/update`, e.g.
`{"inputResponses": {"name": {"action": "accept", "content": {"name": "Luca"}}}}`. The task then goes
back to `working` and completes with "Hello, Luca!".
"""

from __future__ import annotations

from mcp_tasks.runtime import ToolContext, ToolError, run


def main(ctx: ToolContext) -> str:
    answer = ctx.elicit("name", "Please enter your name.", {"name": {"type": "string"}})
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
