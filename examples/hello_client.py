"""Call the SEP's `hello_world` tool with the official `mcp` SDK client and the tasks extension.

Run `make run` in another terminal first, then: `.venv/bin/python examples/hello_client.py [URL]`.
The client declares `io.modelcontextprotocol/tasks`, receives a task, answers the task's elicitation
(asking you on the terminal) through `tasks/update`, and prints the final result. Against a server
started with `--tokens` (or the Helm chart), pass the bearer token in `MCPTASKS_TOKEN`.
"""

from __future__ import annotations

import asyncio
import os
import sys

import httpx2
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import ElicitRequestParams, ElicitResult

from mcp_tasks.client import TasksClientExtension
from mcp_tasks.protocol.models import GetTaskResult


async def ask_on_terminal(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
    answer = await asyncio.to_thread(input, f"{params.message} ")
    return ElicitResult(action="accept", content={"name": answer.strip() or "world"})


_last_shown: list[str] = []


async def show(task: GetTaskResult) -> None:
    """Print the task's status when it changes (not on every poll)."""
    line = f"  task {task.task_id[:8]}…: {task.status.value}" + (
        f" ({task.status_message})" if task.status_message else ""
    )
    if _last_shown[-1:] != [line]:
        _last_shown.append(line)
        print(line)


async def main(url: str) -> None:
    token = os.environ.get("MCPTASKS_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http_client:
        transport = streamable_http_client(url, http_client=http_client)
        async with Client(
            transport, extensions=[TasksClientExtension(on_update=show)], elicitation_callback=ask_on_terminal
        ) as client:
            result = await client.call_tool("hello_world", {})
            print(result.content[0].text)  # type: ignore[union-attr]


def first_error(exc: BaseException) -> BaseException:
    """The error that started it: the SDK's task groups wrap a refusal or a lost connection in groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def hint_for(cause: BaseException) -> str:
    """What to try next, for the refusals a first run meets (no server, no token, not the MCP path)."""
    text = str(cause)
    if isinstance(cause, httpx2.ConnectError | OSError):
        return " (is `make run` serving there?)"
    if "Unauthorized" in text:
        return " (this server wants a token: set MCPTASKS_TOKEN to one of its --tokens file)"
    if "Not Found" in text:
        return " (the MCP endpoint is the path /mcp, e.g. http://127.0.0.1:8000/mcp)"
    return ""


if __name__ == "__main__":
    url = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8000/mcp"
    try:
        asyncio.run(main(url))
    except (MCPError, httpx2.HTTPError, OSError, BaseExceptionGroup) as exc:
        cause = first_error(exc)
        if not isinstance(cause, MCPError | httpx2.HTTPError | OSError):
            raise
        sys.exit(f"{url}: {type(cause).__name__}: {cause}{hint_for(cause)}")
