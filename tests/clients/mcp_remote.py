"""`mcp-remote` (npm, `typescript.MCP_REMOTE`), the stdio-to-Streamable-HTTP bridge desktop hosts run for a
remote server, spawned as such a host spawns it and spoken to over its stdin/stdout.

Messages are newline-delimited JSON-RPC 2.0 (the MCP stdio transport). The bridge gets a static
`Authorization: Bearer` header and its own config folder (`MCP_REMOTE_CONFIG_DIR`, where it would keep OAuth
state), so with a valid token it never starts a sign-in or opens a browser.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

from tests.clients import typescript

ANSWER_TIMEOUT_S: Final = 60.0
"""How long one request may wait for its answer through the bridge before the test fails."""


class Bridge:
    """One running `mcp-remote`, as its host: requests with ids, answers read line by line from stdout.

    A request the bridge sends us (`ping`) is answered at once; anything else it asks gets -32601, as a
    host without that capability answers. Notifications are kept in `notifications`."""

    def __init__(self, process: asyncio.subprocess.Process, stderr: Path) -> None:
        self._process = process
        self._stderr = stderr
        self._next_id = 0
        self.notifications: list[dict[str, Any]] = []

    async def _send(self, message: dict[str, Any]) -> None:
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps(message).encode() + b"\n")
        await self._process.stdin.drain()

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        await self._send({"jsonrpc": "2.0", "method": method, **({"params": params} if params is not None else {})})

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send `method` and return the whole response message (`result` or `error`); fails the test with
        the bridge's log when it exits or does not answer within `ANSWER_TIMEOUT_S`."""
        self._next_id += 1
        request_id = self._next_id
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        await self._send(message)
        assert self._process.stdout is not None
        async with asyncio.timeout(ANSWER_TIMEOUT_S):
            while True:
                line = await self._process.stdout.readline()
                assert line, f"mcp-remote exited ({self._process.returncode}): {self.log()[-3000:]}"
                received: dict[str, Any] = json.loads(line)
                if "method" in received and "id" in received:
                    await self._answer(received)
                elif "method" in received:
                    self.notifications.append(received)
                elif received.get("id") == request_id:
                    return received

    async def _answer(self, request: dict[str, Any]) -> None:
        if request["method"] == "ping":
            await self._send({"jsonrpc": "2.0", "id": request["id"], "result": {}})
        else:
            error = {"code": -32601, "message": f"this host does not handle {request['method']}"}
            await self._send({"jsonrpc": "2.0", "id": request["id"], "error": error})

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """`tools/call`; the `CallToolResult` (fails the test on a JSON-RPC error)."""
        answer = await self.request("tools/call", {"name": name, "arguments": arguments})
        assert "result" in answer, answer
        result: dict[str, Any] = answer["result"]
        return result

    def log(self) -> str:
        """What the bridge wrote to stderr so far."""
        return self._stderr.read_text(errors="replace") if self._stderr.exists() else ""


@contextlib.asynccontextmanager
async def bridged(url: str, token: str, folder: Path, *flags: str) -> AsyncIterator[Bridge]:
    """`mcp-remote <url> --header "Authorization: Bearer <token>" <flags>` running with its config and log
    in `folder`; stopped (stdin closed, then SIGTERM) on exit. Skips the test without npm."""
    cache = typescript.installed_pin(typescript.MCP_REMOTE)
    folder.mkdir(parents=True, exist_ok=True)
    stderr = folder / "stderr.log"
    with stderr.open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            str(typescript.node_of(cache)),
            str(cache / "node_modules" / "mcp-remote" / "dist" / "proxy.js"),
            url,
            "--header",
            f"Authorization: Bearer {token}",
            *flags,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            cwd=folder,
            env={**os.environ, "MCP_REMOTE_CONFIG_DIR": str(folder / "config")},
        )
    try:
        yield Bridge(process, stderr)
    finally:
        if process.returncode is None:
            assert process.stdin is not None
            process.stdin.close()
            process.terminate()
        await asyncio.wait_for(process.wait(), 30)
