"""Shared fixtures: a real embedded server on 127.0.0.1 (real SQLite file, real tool processes) and a raw MCP client."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import io
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar, overload

import aiohttp
import pytest
from aiohttp import web

from mcp_tasks import gateway
from mcp_tasks.cli.serve import LINGERING_TIME_S, build_app
from mcp_tasks.cli.settings import ServeSettings, Settings, validate
from mcp_tasks.gateway.context import Services
from mcp_tasks.gateway.transport import SERVICES_KEY
from mcp_tasks.protocol import constants
from mcp_tasks.runner import LocalRunner, RunnerSettings
from mcp_tasks.store.sqlite import SqliteTaskStore
from mcp_tasks.tasks import fair_share

REPO = Path(__file__).resolve().parent.parent
TOOL_DIRS = (REPO / "conformance" / "tools", REPO / "tests" / "tools", REPO / "examples" / "tools")
PROTOCOL_VERSION = constants.PROTOCOL_VERSION
TASKS_CAPS: dict[str, Any] = {"elicitation": {}, "extensions": {constants.TASKS_EXTENSION: {}}}
PLAIN_CAPS: dict[str, Any] = {}
WAIT_S = 10.0
POLL_S = 0.05
T = TypeVar("T")
Changed = Callable[[], Awaitable[object]]

SHARED_CLUSTERS: dict[str, str] = {"real_node": "real-node", "control_plane": "control-plane"}
"""Fixture → the `xdist_group` of every test that uses it (directly or through another fixture): the tests of
one cluster run on one worker, in collection order, so a session starts each cluster once."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Group the tests for `pytest -n 2 --dist loadgroup` (`make pytest`): a test of a shared cluster goes
    with that cluster's group (`SHARED_CLUSTERS`), any other with its file (its module fixtures start once).
    The cluster groups come first, so a worker starts the longest run at once while the other takes the
    files. Without `-n` nothing changes.
    """
    if not (config.pluginmanager.hasplugin("xdist") and getattr(config.option, "numprocesses", None)):
        return
    grouped: list[pytest.Item] = []
    rest: list[pytest.Item] = []
    for item in items:
        used = getattr(item, "fixturenames", ())
        group = next((name for fixture, name in SHARED_CLUSTERS.items() if fixture in used), None)
        (grouped if group else rest).append(item)
        item.add_marker(pytest.mark.xdist_group(group or item.nodeid.split("::", 1)[0]))
    items[:] = grouped + rest


@overload
async def until(
    check: Callable[[], Awaitable[T | None]],
    *,
    timeout_s: float = ...,
    changed: Changed | None = ...,
    interval_s: float = ...,
) -> T: ...


@overload
async def until(
    check: Callable[[], T | None],
    *,
    timeout_s: float = ...,
    changed: Changed | None = ...,
    interval_s: float = ...,
) -> T: ...


async def until(
    check: Callable[[], Any],
    *,
    timeout_s: float = WAIT_S,
    changed: Changed | None = None,
    interval_s: float = POLL_S,
) -> Any:
    """The first truthy value of `check()` (sync or async); `TimeoutError` after `timeout_s`.

    Between checks it waits on `changed()` when the condition has an event source (say
    `lambda: store.wait_for_change(1.0)`: spurious wake-ups are fine, a missed one costs that bound). Without
    one it polls every `interval_s`: for what nothing tells us about (another process's state, `/proc`, an
    API server read through kubectl).
    """
    async with asyncio.timeout(timeout_s):
        while True:
            value = check()
            if inspect.isawaitable(value):
                value = await value
            if value:
                return value
            if changed is not None:
                await changed()
            else:
                await asyncio.sleep(interval_s)  # the suite's one polling wait: used only where no event exists


def reported(task: dict[str, Any]) -> bool:
    """Whether a task's `statusMessage` is its tool's (it runs and reported), not the queue's (`queued: …`)."""
    message = task.get("statusMessage")
    return isinstance(message, str) and not message.startswith(fair_share.QUEUED_PREFIX)


def server_settings(data_dir: Path, **runner: Any) -> Settings:
    """Settings for a test server: fast leases and sweeps, the conformance and test tools, tools stopped with it."""
    # A test server's stop stops its tools (no next start adopts them: they would outlive the test);
    # tests/e2e/test_durability.py runs the default hand-over with real server processes.
    defaults = RunnerSettings(
        lease_duration_s=3.0, claim_poll_s=0.2, sweep_interval_s=0.2, shutdown_grace_s=1.0, stop_hands_over=False
    )
    runner_settings = replace(defaults, **runner)
    return validate(
        Settings(serve=ServeSettings(tools_dirs=TOOL_DIRS, data_dir=data_dir, port=0), runner=runner_settings)
    )


async def exited(pid: int, timeout_s: float = WAIT_S) -> None:
    """Return once process `pid` has exited (its pidfd turns readable: no polling), at once if it is gone."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    loop = asyncio.get_running_loop()
    gone = loop.create_future()
    loop.add_reader(fd, lambda: None if gone.done() else gone.set_result(None))
    try:
        async with asyncio.timeout(timeout_s):
            await gone
    finally:
        loop.remove_reader(fd)
        os.close(fd)


@dataclass
class Reply:
    """An HTTP response from the MCP endpoint."""

    status: int
    headers: dict[str, str]
    body: Any

    @property
    def result(self) -> dict[str, Any]:
        assert "result" in self.body, self.body
        return dict(self.body["result"])

    @property
    def error(self) -> dict[str, Any]:
        assert "error" in self.body, self.body
        return dict(self.body["error"])


class McpHttp:
    """A raw MCP 2026-07-28 client: builds the envelope and headers, lets a test override any of them."""

    def __init__(
        self, session: aiohttp.ClientSession, url: str, token: str | None = None, changed: Changed | None = None
    ) -> None:
        self.session = session
        self.url = url
        self.token = token
        self.changed = changed  # what `wait_task` waits on between reads (the server's change feed), else it polls
        self._next_id = 0

    def envelope(self, caps: dict[str, Any]) -> dict[str, Any]:
        return {
            constants.META_PROTOCOL_VERSION: PROTOCOL_VERSION,
            constants.META_CLIENT_CAPABILITIES: caps,
            constants.META_CLIENT_INFO: {"name": "tests", "version": "0"},
        }

    async def post(self, body: bytes | str | io.BytesIO, headers: dict[str, str]) -> Reply:
        async with self.session.post(self.url, data=body, headers=headers) as response:
            text = await response.text()
            parsed = json.loads(text) if text and response.content_type == "application/json" else text
            return Reply(response.status, dict(response.headers), parsed)

    async def request(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        caps: dict[str, Any] | None = None,
        headers: dict[str, str | None] | None = None,
        request_id: int | str | None = None,
        with_meta: bool = True,
    ) -> Reply:
        body, sent = self.prepare(
            method, params, caps=caps, headers=headers, request_id=request_id, with_meta=with_meta
        )
        return await self.post(body, sent)

    def prepare(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        caps: dict[str, Any] | None = None,
        headers: dict[str, str | None] | None = None,
        request_id: int | str | None = None,
        with_meta: bool = True,
    ) -> tuple[str, dict[str, str]]:
        """The body and headers of a request (for a test that reads the response as it streams)."""
        self._next_id += 1
        params = dict(params or {})
        if with_meta:
            params["_meta"] = self.envelope(TASKS_CAPS if caps is None else caps)
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": self._next_id if request_id is None else request_id}
        body["method"] = method
        body["params"] = params
        sent: dict[str, str | None] = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            constants.HEADER_PROTOCOL_VERSION: PROTOCOL_VERSION,
            constants.HEADER_METHOD: method,
        }
        name_key = constants.NAME_BEARING_PARAMS.get(method)
        if name_key and isinstance(params.get(name_key), str):
            sent[constants.HEADER_NAME] = params[name_key]
        if self.token:
            sent["Authorization"] = f"Bearer {self.token}"
        sent.update(headers or {})
        return json.dumps(body), {k: v for k, v in sent.items() if v is not None}

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None, **kwargs: Any) -> Reply:
        params: dict[str, Any] = {"name": name}
        if arguments is not None:
            params["arguments"] = arguments
        params.update(kwargs.pop("extra", {}))
        return await self.request(constants.METHOD_TOOLS_CALL, params, **kwargs)

    async def start_task(self, name: str, arguments: dict[str, Any] | None = None) -> str:
        reply = await self.call_tool(name, arguments or {})
        assert reply.result["resultType"] == "task", reply.body
        return str(reply.result["taskId"])

    async def get(self, task_id: str, **kwargs: Any) -> Reply:
        return await self.request(constants.METHOD_TASKS_GET, {"taskId": task_id}, **kwargs)

    async def update(self, task_id: str, responses: dict[str, Any], **kwargs: Any) -> Reply:
        return await self.request(
            constants.METHOD_TASKS_UPDATE, {"taskId": task_id, "inputResponses": responses}, **kwargs
        )

    async def cancel(self, task_id: str, **kwargs: Any) -> Reply:
        return await self.request(constants.METHOD_TASKS_CANCEL, {"taskId": task_id}, **kwargs)

    async def wait_task(
        self, task_id: str, holds: Callable[[dict[str, Any]], bool], timeout_s: float = WAIT_S
    ) -> dict[str, Any]:
        """Read `tasks/get` until `holds(task)`, waking on the server's change feed if known; return that snapshot."""

        async def reached() -> dict[str, Any] | None:
            task = (await self.get(task_id)).result
            return task if holds(task) else None

        return await until(reached, timeout_s=timeout_s, changed=self.changed)

    async def wait_status(self, task_id: str, *statuses: str, timeout_s: float = WAIT_S) -> dict[str, Any]:
        return await self.wait_task(task_id, lambda t: t["status"] in statuses, timeout_s)


@dataclass
class Embedded:
    """A running embedded server."""

    url: str
    app: web.Application
    runner: LocalRunner

    @property
    def services(self) -> Services:
        return self.app[SERVICES_KEY]

    @property
    def store(self) -> SqliteTaskStore:
        store = self.services.store
        assert isinstance(store, SqliteTaskStore)
        return store

    async def changed(self) -> None:
        """Return when a task may have changed (the store's change feed), or after a second."""
        await self.store.wait_for_change(1.0)


async def start_embedded(settings: Settings) -> tuple[Embedded, web.AppRunner]:
    app, runner = build_app(settings)
    web_runner = gateway.create_runner(app, shutdown_timeout_s=2, lingering_time_s=LINGERING_TIME_S)
    await web_runner.setup()
    await web.TCPSite(web_runner, "127.0.0.1", 0).start()
    port = web_runner.addresses[0][1]
    return Embedded(f"http://127.0.0.1:{port}/mcp", app, runner), web_runner


@pytest.fixture(autouse=True)
async def no_leaked_asyncio_tasks() -> AsyncIterator[None]:
    """Fail a test that leaves asyncio tasks running after its fixtures are torn down (CONVENTIONS.md §Tests)."""
    before = asyncio.all_tasks()
    yield
    current = asyncio.current_task()
    leaked = [t for t in asyncio.all_tasks() - before if t is not current and not t.done()]
    if leaked:  # connection handlers finish on the loop's next turns after the server closed them
        await asyncio.wait(leaked, timeout=2.0)
        leaked = [t for t in leaked if not t.done()]
    assert not leaked, f"leaked asyncio tasks: {[t.get_name() for t in leaked]}"


@contextlib.asynccontextmanager
async def serving(settings: Settings) -> AsyncIterator[Embedded]:
    """An embedded server running with `settings` for the block; stopped and cleaned up after it."""
    server, web_runner = await start_embedded(settings)
    try:
        yield server
    finally:
        await web_runner.cleanup()


TOKENS = """\
tokens:
  - {token: alice-token, tenant: acme, subject: alice}
  - {token: bob-token, tenant: acme, subject: bob}
  - {token: eve-token, tenant: evil, subject: alice}
"""
"""Three principals: alice and bob of tenant acme, and eve, of tenant evil, whose subject is also alice."""


def with_tokens(settings: Settings, folder: Path) -> Settings:
    """`settings` that require the bearer tokens of `TOKENS` (the file is written into `folder`)."""
    tokens = folder / "tokens.yaml"
    tokens.write_text(TOKENS)
    return replace(settings, serve=replace(settings.serve, tokens_file=tokens))


@pytest.fixture
async def embedded(tmp_path: Path) -> AsyncIterator[Embedded]:
    async with serving(server_settings(tmp_path)) as server:
        yield server


@pytest.fixture
async def secured(tmp_path: Path) -> AsyncIterator[Embedded]:
    """An embedded server that requires the bearer tokens of `TOKENS`."""
    async with serving(with_tokens(server_settings(tmp_path / "data"), tmp_path)) as server:
        yield server


@pytest.fixture
async def http_session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
async def mcp(embedded: Embedded, http_session: aiohttp.ClientSession) -> McpHttp:
    return McpHttp(http_session, embedded.url, changed=embedded.changed)


Factory = Callable[..., Awaitable[Any]]
