"""HTTP's sharp edges, on a real socket: repeated credentials, clients that hang up, malformed HTTP.

Our choice (issue 21, "smaller sharp edges"): a request is refused whole when a proxy could read another
`Authorization` value than we do; a client's own trouble is never an ERROR traceback in our log; and
whatever bytes arrive, the answer is ours (short JSON that quotes nothing), the connection is closed, and
memory does not grow with the number of such requests. Raw asyncio streams, as no HTTP client sends
these byte streams on purpose.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from mcp_types import jsonrpc

from mcp_tasks.protocol import constants
from tests.conftest import Embedded

TOOLS_LIST = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/list",
        "params": {
            "_meta": {
                constants.META_PROTOCOL_VERSION: constants.PROTOCOL_VERSION,
                constants.META_CLIENT_CAPABILITIES: {},
            }
        },
    }
).encode()


def post(body: bytes, *header_lines: bytes, length: int | None = None) -> bytes:
    """A `tools/list` POST head (plus `header_lines`) with `Content-Length: length` (default: the body's)."""
    head = [
        b"POST /mcp HTTP/1.1",
        b"Host: 127.0.0.1",
        b"Content-Type: application/json",
        b"Accept: application/json, text/event-stream",
        f"{constants.HEADER_PROTOCOL_VERSION}: {constants.PROTOCOL_VERSION}".encode(),
        f"{constants.HEADER_METHOD}: tools/list".encode(),
        *header_lines,
        f"Content-Length: {len(body) if length is None else length}".encode(),
    ]
    return b"\r\n".join(head) + b"\r\n\r\n" + body


def address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split("/")[0].split(":")
    return host, int(port)


async def exchange(url: str, stream: bytes) -> bytes:
    """Send `stream` on a new connection and return all the server sends until it closes (at most 5 s)."""
    reader, writer = await asyncio.open_connection(*address(url))
    try:
        writer.write(stream)
        await writer.drain()
        async with asyncio.timeout(5):
            return await reader.read()  # returns at EOF only: the server closed the connection
    finally:
        writer.close()
        await writer.wait_closed()


def responses(answer: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    """The HTTP responses in `answer`, in order: `(status, headers with lower-case names, body)`."""
    found = []
    while answer:
        head, _, rest = answer.partition(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
        length = int(headers["content-length"])
        found.append((int(status_line.split()[1]), headers, rest[:length]))
        answer = rest[length:]
    return found


async def raw_post(url: str, headers: list[tuple[str, str]]) -> tuple[int, Any]:
    """POST `TOOLS_LIST` with `post`'s headers and `headers` (repeats kept, in order); the status and the JSON."""
    lines = [f"{name}: {value}".encode() for name, value in headers]
    answer = await exchange(url, post(TOOLS_LIST, *lines, b"Connection: close"))
    ((status, response_headers, body),) = responses(answer)
    assert response_headers["content-type"].startswith("application/json"), answer
    return status, json.loads(body)


async def test_two_authorization_headers_with_different_tokens_are_refused_like_a_repeated_routing_header(
    secured: Embedded,
) -> None:
    """Our choice: aiohttp hands the first of two `Authorization` headers to authentication, while a proxy
    may read the last; the request is refused whole, as a repeated `Mcp-Method` is (SEP-2243: 400, -32020),
    before any token is judged: two unknown tokens are also 400, not 401.
    """
    routed_status, routed = await raw_post(
        secured.url, [("Authorization", "Bearer alice-token"), (constants.HEADER_METHOD, "tools/call")]
    )
    assert (routed_status, routed["error"]["code"]) == (400, jsonrpc.HEADER_MISMATCH), routed
    for first, second in (("alice-token", "bob-token"), ("bob-token", "alice-token"), ("nobody", "no-one")):
        status, refused = await raw_post(
            secured.url, [("Authorization", f"Bearer {first}"), ("Authorization", f"Bearer {second}")]
        )
        assert status == routed_status, refused
        assert refused.keys() == routed.keys() and refused["error"].keys() == routed["error"].keys(), refused
        assert refused["error"]["code"] == routed["error"]["code"] and refused["id"] is None, refused
        assert constants.HEADER_AUTHORIZATION in refused["error"]["message"]
    status, listed = await raw_post(secured.url, [("Authorization", "Bearer alice-token")])
    assert status == 200 and "tools" in listed["result"], listed


async def test_a_client_that_hangs_up_mid_body_is_logged_once_below_error(
    embedded: Embedded, caplog: pytest.LogCaptureFixture
) -> None:
    """Our choice: a client that closes its connection before the body it announced is its own trouble:
    one INFO line, no traceback, nothing at ERROR (an unauthenticated client could fill the log).
    """
    caplog.set_level(logging.DEBUG)
    _reader, writer = await asyncio.open_connection(*address(embedded.url))
    writer.write(post(TOOLS_LIST[:20], length=len(TOOLS_LIST)))
    await writer.drain()
    writer.close()
    await writer.wait_closed()

    def hang_up_records() -> list[logging.LogRecord]:
        return [r for r in caplog.records if "closed the connection" in r.getMessage()]

    async with asyncio.timeout(5):  # until the server noticed, or logged an error instead
        while not hang_up_records() and not [r for r in caplog.records if r.levelno >= logging.ERROR]:
            await asyncio.sleep(0.02)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info], caplog.text
    (record,) = hang_up_records()
    assert record.levelno in (logging.DEBUG, logging.INFO) and record.name.startswith("mcp_tasks"), caplog.text
