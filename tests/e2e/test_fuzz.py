"""Property-based fuzzing of the whole request surface against a real embedded server on a real socket.

Our choice (crash-only review): whatever a client sends — any method, any params, any `_meta`, any
headers, encodings, sizes and nesting — the server answers within a bound, never with a 5xx, always
with JSON where a JSON-RPC error is due, and still runs a task end to end afterwards. A second test
checks that repeated passes of malformed requests do not grow the server's memory.

Hypothesis drives the generation. The run is bounded for `make test`; a longer one:
`MCPTASKS_FUZZ_EXAMPLES=20000 .venv/bin/pytest tests/e2e/test_fuzz.py`.
"""

from __future__ import annotations

import asyncio
import base64
import gc
import gzip
import io
import json
import os
import tracemalloc
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcp_tasks.cli.settings import ServeSettings
from mcp_tasks.protocol import constants
from tests.conftest import Embedded, server_settings, start_embedded, until

EXAMPLES = int(os.environ.get("MCPTASKS_FUZZ_EXAMPLES", "400"))
REQUEST_TIMEOUT_S = 10.0

FUZZ_TOOLS = """\
apiVersion: mcptasks.io/v1alpha1
kind: McpTool
metadata: {name: echo}
spec:
  name: echo
  description: Answers at once with the size of its arguments (the fuzz target's only tool).
  inputSchema:
    type: object
    properties:
      text: {type: string, maxLength: 64}
      count: {type: integer, minimum: 0, maximum: 3}
  execution: {taskPolicy: optional}
  container:
    image: ghcr.io/mcp-tasks/tests:0.1.0
    command: [python, -c, "from mcp_tasks.runtime import run; run(lambda ctx: 'echo ' + str(len(ctx.arguments)))"]
---
apiVersion: mcptasks.io/v1alpha1
kind: McpTool
metadata: {name: ask}
spec:
  name: ask
  description: Asks one question before it starts (pre-creation input).
  inputSchema: {type: object}
  inputBeforeTask:
    confirm:
      method: elicitation/create
      params:
        message: Sure?
        requestedSchema: {type: object, properties: {confirm: {type: boolean}}}
  execution: {taskPolicy: optional}
  container:
    image: ghcr.io/mcp-tasks/tests:0.1.0
    command: [python, -c, "from mcp_tasks.runtime import run; run(lambda ctx: 'asked')"]
"""

METHODS = [
    "server/discover",
    "tools/list",
    "tools/call",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "subscriptions/listen",
    "resources/list",
    "resources/read",
    "tasks/result",
    "tasks/list",
    "initialize",
    "ping",
    "notifications/initialized",
]
META_KEYS = [
    constants.META_PROTOCOL_VERSION,
    constants.META_CLIENT_CAPABILITIES,
    constants.META_CLIENT_INFO,
    "io.modelcontextprotocol/related-task",
    "progressToken",
]

texts = st.text(max_size=40) | st.sampled_from(["", "echo", "ask", "a\ud800b", "\x00", "0" * 32, "é€😀"])
scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | texts
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=25,
)
capabilities: st.SearchStrategy[dict[str, Any]] = st.fixed_dictionaries(
    {},
    optional={
        "elicitation": st.just({}) | json_values,
        "sampling": st.just({}) | json_values,
        "roots": st.just({}) | json_values,
        "extensions": st.just({constants.TASKS_EXTENSION: {}}) | json_values,
    },
)
valid_meta = st.fixed_dictionaries(
    {
        constants.META_PROTOCOL_VERSION: st.just(constants.PROTOCOL_VERSION) | texts,
        constants.META_CLIENT_CAPABILITIES: capabilities,
    },
    optional={constants.META_CLIENT_INFO: st.just({"name": "fuzz", "version": "0"}) | json_values},
)
metas = valid_meta | st.dictionaries(st.sampled_from(META_KEYS) | texts, json_values, max_size=4) | json_values
params_objects = st.fixed_dictionaries(
    {},
    optional={
        "_meta": metas,
        "name": st.sampled_from(["echo", "ask", "missing"]) | json_values,
        "arguments": st.fixed_dictionaries({}, optional={"text": json_values, "count": json_values}) | json_values,
        "taskId": st.just("0" * 32) | json_values,
        "uri": st.sampled_from(["mcptasks://artifacts/x/result.json", "file:///etc/passwd"]) | json_values,
        "inputResponses": st.dictionaries(texts, json_values, max_size=3)
        | st.just({"confirm": {"action": "accept", "content": {"confirm": True}}}),
        "requestState": texts,
        "cursor": texts,
        "filter": json_values,
        "task": json_values,
    },
)
messages = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.just("2.0") | json_values,
        "id": st.integers(-(2**63), 2**63) | texts | json_values,
        "method": st.sampled_from(METHODS) | json_values,
        "params": params_objects | json_values,
        "result": json_values,
    },
)


@st.composite
def requests(draw: st.DrawFn) -> tuple[dict[str, str], bytes, int]:
    """Headers, raw body and trailing padding (bytes) of one POST: mostly well-formed JSON-RPC, sometimes
    mangled at the byte level; the padding (applied when sending) takes a body near or over the limit."""
    message = draw(messages)
    body = json.dumps(message, ensure_ascii=draw(st.booleans())).encode("utf-8", "surrogatepass")
    mangle = draw(st.sampled_from(["none", "none", "none", "truncate", "splice", "raw"]))
    if mangle == "truncate" and body:
        body = body[: draw(st.integers(0, len(body) - 1))]
    elif mangle == "splice":
        at = draw(st.integers(0, len(body)))
        body = body[:at] + draw(st.binary(max_size=8)) + body[at:]
    elif mangle == "raw":
        body = draw(st.binary(max_size=64))
    headers: dict[str, str] = {"Content-Type": draw(st.sampled_from(["application/json", "text/plain", ""]))}
    method = message.get("method")
    if draw(st.booleans()):
        headers[constants.HEADER_PROTOCOL_VERSION] = draw(st.sampled_from([constants.PROTOCOL_VERSION, "2025-11-25"]))
    if draw(st.booleans()):
        sendable = isinstance(method, str) and method.isascii() and method.isprintable()  # what a client can send
        headers[constants.HEADER_METHOD] = str(method) if sendable and draw(st.booleans()) else "tools/list"
    header_text = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=30)
    if draw(st.booleans()):
        headers[constants.HEADER_NAME] = draw(header_text | st.sampled_from(["echo", "=?base64?ZWNobw==?="]))
    if draw(st.integers(0, 4)) == 0:
        headers["Mcp-Param-Text"] = draw(header_text)
    if draw(st.integers(0, 4)) == 0:
        headers["Origin"] = draw(header_text | st.sampled_from(["http://[", "http://127.0.0.1:1", "null"]))
    if draw(st.integers(0, 4)) == 0:
        headers["Authorization"] = "Bearer " + draw(header_text)
    coding = draw(st.sampled_from(["", "", "", "gzip", "deflate", "gzip-lie", "br", "identity"]))
    if coding == "gzip":
        body = gzip.compress(body)
    elif coding == "deflate":
        body = zlib.compress(body)
    if coding:
        headers["Content-Encoding"] = "gzip" if coding == "gzip-lie" else coding
    if draw(st.integers(0, 10)) == 0:
        headers["Mcp-Session-Id"] = base64.b64encode(draw(st.binary(max_size=12))).decode()
    padding = draw(st.sampled_from([0] * 28 + [10_000, 1_100_000]))
    return {k: v for k, v in headers.items() if v}, body, padding


async def post(session: aiohttp.ClientSession, url: str, headers: dict[str, str], body: bytes) -> None:
    """Send one request and check the answer's shape; raise AssertionError on a violation."""
    async with asyncio.timeout(REQUEST_TIMEOUT_S):
        data = io.BytesIO(body)  # aiohttp warns on large raw bytes; a stream also sends it in pieces
        async with session.post(url, data=data, headers=headers, skip_auto_headers=["Content-Type"]) as response:
            status = response.status
            text = await response.read()
            content_type = response.content_type
    assert status < 500, (status, text[:300], headers)
    if status in (202, 405):
        return
    if content_type == "text/event-stream":
        return  # subscriptions/listen: its stream is checked by tests/e2e/test_listen.py
    assert content_type == "application/json", (status, content_type, text[:300])
    answer = json.loads(text)
    assert answer["jsonrpc"] == "2.0" and ("result" in answer) != ("error" in answer), answer
    if status == 200:  # a legacy-era request's error travels with 200; a modern one's never does
        assert "result" in answer or not _names_modern_version(body), answer
    else:
        assert isinstance(answer["error"]["code"], int) and answer["error"]["message"], answer


def _names_modern_version(body: bytes) -> bool:
    """Whether the body is plain JSON whose `params._meta` names a protocol version (the modern era)."""
    try:
        payload = json.loads(body)
    except ValueError:
        return False
    params = payload.get("params") if isinstance(payload, dict) else None
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and constants.META_PROTOCOL_VERSION in meta


@contextmanager
def fuzz_server(tmp_path: Path) -> Iterator[tuple[asyncio.AbstractEventLoop, Embedded, aiohttp.ClientSession]]:
    """A real embedded server with only the fuzz tools, on its own loop (Hypothesis calls are synchronous)."""
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "fuzz.yaml").write_text(FUZZ_TOOLS)
    base = server_settings(tmp_path / "data")
    config = replace(base, serve=replace(base.serve, tools_dirs=(tools,)))
    assert isinstance(config.serve, ServeSettings)
    loop = asyncio.new_event_loop()
    server, web_runner = loop.run_until_complete(start_embedded(config))
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    session = loop.run_until_complete(_session(timeout))
    try:
        yield loop, server, session
    finally:
        loop.run_until_complete(session.close())
        loop.run_until_complete(web_runner.cleanup())
        loop.close()


async def _session(timeout: aiohttp.ClientTimeout) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(timeout=timeout, auto_decompress=False)


async def still_runs_a_task(session: aiohttp.ClientSession, server: Embedded) -> None:
    """The server, after the fuzz, still creates a task and runs it to `completed`."""
    meta = {
        constants.META_PROTOCOL_VERSION: constants.PROTOCOL_VERSION,
        constants.META_CLIENT_CAPABILITIES: {"extensions": {constants.TASKS_EXTENSION: {}}},
    }
    headers = {
        "Content-Type": "application/json",
        constants.HEADER_PROTOCOL_VERSION: constants.PROTOCOL_VERSION,
        constants.HEADER_METHOD: "tools/call",
        constants.HEADER_NAME: "echo",
    }
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {}, "_meta": meta},
    }
    async with session.post(server.url, json=call, headers=headers) as response:
        task_id = (await response.json())["result"]["taskId"]
    headers = {**headers, constants.HEADER_METHOD: "tasks/get", constants.HEADER_NAME: task_id}
    get = {"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"taskId": task_id, "_meta": meta}}

    async def ended() -> dict[str, Any] | None:
        async with session.post(server.url, json=get, headers=headers) as response:
            task: dict[str, Any] = (await response.json())["result"]
        return task if task["status"] != "working" else None

    task = await until(ended, timeout_s=20, changed=server.changed)
    assert task["status"] == "completed" and task["result"]["content"][0]["text"] == "echo 0", task


def test_no_request_gets_a_5xx_a_non_json_error_or_a_hang(tmp_path: Path) -> None:
    with fuzz_server(tmp_path) as (loop, server, session):

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(requests())
        def one(request: tuple[dict[str, str], bytes, int]) -> None:
            headers, body, padding = request
            loop.run_until_complete(post(session, server.url, headers, body + b" " * padding))

        one()
        loop.run_until_complete(still_runs_a_task(session, server))


MALFORMED: list[tuple[dict[str, str], bytes]] = [
    ({"Content-Type": "application/json"}, b"{"),
    ({"Content-Type": "application/json", "Origin": "http://["}, b"{}"),
    ({"Content-Type": "application/json", "Content-Encoding": "gzip"}, b"not gzip"),
    ({"Content-Type": "application/json"}, b'{"jsonrpc":"2.0","id":"\xed\xa0\x80","method":"ping"}'),
    ({"Content-Type": "application/json"}, b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":[]}'),
    ({"Content-Type": "application/json"}, b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":1}}'),
    ({"Content-Type": "application/json"}, b"[" * 5000 + b"]" * 5000),
]


def test_repeated_passes_of_malformed_requests_do_not_grow_memory(tmp_path: Path) -> None:
    """Python heap allocations (tracemalloc) after warm-up passes stay flat across further passes."""
    with fuzz_server(tmp_path) as (loop, server, session):

        async def one_pass() -> None:
            for _ in range(30):
                for headers, body in MALFORMED:
                    await post(session, server.url, headers, body)

        for _ in range(3):  # warm-up: caches, pools, lazy imports
            loop.run_until_complete(one_pass())
        gc.collect()
        tracemalloc.start()
        try:
            before, _ = tracemalloc.get_traced_memory()
            for _ in range(5):
                loop.run_until_complete(one_pass())
            gc.collect()
            after, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        growth = after - before
        assert growth < 512 * 1024, f"heap grew {growth} bytes over 5 passes of {30 * len(MALFORMED)} requests"
