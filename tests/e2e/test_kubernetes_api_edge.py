"""The Kubernetes API edge (`store.kubernetes.client`) against a fake API server on a real socket.

The fake is an aiohttp server on 127.0.0.1 that answers what each test tells it to, or accepts a
request and never answers (what a black-holed API server looks like to the client). Every behaviour
here is our own choice (CONVENTIONS.md: every network call has a deadline; stores map backend errors
at their edge), not a spec requirement.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

import pytest
from aiohttp import web
from kubernetes_asyncio.client import ApiClient, Configuration

from mcp_tasks.operator.credentials import PodIdentity
from mcp_tasks.operator.leadership import LeaderElection, LeaseTiming
from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.store.kubernetes import client
from mcp_tasks.store.kubernetes.client import close_api_client
from mcp_tasks.store.kubernetes.watch import Reflector
from mcp_tasks.tasks.errors import StoreUnavailable
from tests.conftest import until

WAIT_S = 5.0
"""Bound of every wait in these tests, in seconds."""

Answer = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class FakeApi:
    """A fake API server: `answer` serves each request; `requests` counts them, `arrived` is set on each."""

    url: str
    answer: Answer | None = None
    requests: list[str] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    released: asyncio.Event = field(default_factory=asyncio.Event)

    async def hang(self, request: web.Request) -> web.StreamResponse:
        """Accept the request and answer nothing until the test ends (then 503)."""
        await self.released.wait()
        return web.Response(status=503)

    async def next_request(self) -> None:
        """Wait (bounded) for the next request to arrive."""
        self.arrived.clear()
        async with asyncio.timeout(WAIT_S):
            await self.arrived.wait()


@pytest.fixture
async def fake_api() -> AsyncIterator[FakeApi]:
    fake = FakeApi(url="")

    async def serve(request: web.Request) -> web.StreamResponse:
        fake.requests.append(f"{request.method} {request.path}")
        fake.arrived.set()
        answer = fake.answer or fake.hang
        return await answer(request)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", serve)
    runner = web.AppRunner(app, shutdown_timeout=1)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    fake.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield fake
    finally:
        fake.released.set()
        await runner.cleanup()


@pytest.fixture
async def api(fake_api: FakeApi) -> AsyncIterator[ApiClient]:
    configuration = Configuration(host=fake_api.url)
    api_client = client.open_api_client(configuration)
    try:
        yield api_client
    finally:
        await close_api_client(api_client)


def status_answer(status: int) -> Answer:
    async def answer(request: web.Request) -> web.StreamResponse:
        body = {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "message": "as the test asked",
            "code": status,
        }
        return web.json_response(body, status=status)

    return answer


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (404, client.NotFound),
        (409, client.Conflict),
        (410, client.Gone),
        (422, client.Invalid),
        (403, client.ApiError),
        (429, StoreUnavailable),
        (500, StoreUnavailable),
        (503, StoreUnavailable),
    ],
)
async def test_each_error_answer_becomes_one_error_type_by_the_one_table(
    fake_api: FakeApi, api: ApiClient, status: int, expected: type[Exception]
) -> None:
    """A refusal keeps its status and the API server's message; a 429 or 5xx is "unavailable, retry"."""
    fake_api.answer = status_answer(status)
    objects = client.Apis(api).objects
    for call in (client.call, client.call_json):
        with pytest.raises(expected) as raised:
            await call(objects.get_namespaced_custom_object, "mcptasks.io", "v1", "ns", "mcptasks", "t-1")
        if isinstance(raised.value, client.ApiError):
            assert type(raised.value) is expected
            assert raised.value.status == status
            assert raised.value.message == "as the test asked"


async def test_a_request_the_api_server_never_answers_is_unavailable_within_its_timeout(
    fake_api: FakeApi, api: ApiClient
) -> None:
    """A black-holed request ends at `timeout_s` as `StoreUnavailable`, not never."""
    objects = client.Apis(api).objects
    async with asyncio.timeout(WAIT_S):
        for call in (client.call, client.call_json):
            with pytest.raises(StoreUnavailable):
                await call(objects.get_namespaced_custom_object, "g", "v1", "ns", "p", "x", timeout_s=0.2)


async def test_a_refused_connection_is_unavailable() -> None:
    """No API server listening: `StoreUnavailable` (transient), not an `OSError` leaking to the caller."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    api_client = client.open_api_client(Configuration(host=f"http://127.0.0.1:{port}"))
    try:
        with pytest.raises(StoreUnavailable):
            await client.call(client.Apis(api_client).core.read_namespaced_pod, "p", "ns", timeout_s=WAIT_S)
    finally:
        await close_api_client(api_client)


async def test_a_watch_yields_events_in_order_and_a_410_error_event_is_gone(fake_api: FakeApi, api: ApiClient) -> None:
    """WATCH events arrive as parsed JSON in server order; an `ERROR` event with code 410 raises `Gone`."""
    events = [
        {"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "5"}}},
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "6"}}},
        {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}},
    ]
    asked: dict[str, str] = {}

    async def stream(request: web.Request) -> web.StreamResponse:
        asked.update(request.query)
        response = web.StreamResponse()
        await response.prepare(request)
        for event in events:
            await response.write(json.dumps(event).encode() + b"\n")
        await response.write_eof()
        return response

    fake_api.answer = stream
    seen: list[str] = []
    objects = client.Apis(api).objects
    with pytest.raises(client.Gone):
        async with (
            asyncio.timeout(WAIT_S),
            client.watch(objects.list_namespaced_custom_object, "g", "v1", "ns", "p", server_timeout_s=7) as stream_,
        ):
            async for event in stream_:
                seen.append(str(event["type"]))
    assert seen == ["ADDED", "BOOKMARK"]
    assert asked["watch"].lower() == "true" and asked["timeoutSeconds"] == "7"


async def test_a_watch_whose_headers_never_come_is_unavailable_within_its_connect_timeout(
    fake_api: FakeApi, api: ApiClient
) -> None:
    objects = client.Apis(api).objects
    watching = client.watch(
        objects.list_namespaced_custom_object, "g", "v1", "ns", "p", server_timeout_s=60, connect_timeout_s=0.2
    )
    with pytest.raises(StoreUnavailable):
        async with asyncio.timeout(WAIT_S), watching:
            pytest.fail("the watch opened without an answer")


async def test_a_leader_whose_renew_hangs_stops_acting_within_its_renew_deadline(
    fake_api: FakeApi, api: ApiClient
) -> None:
    """A replica acts only while it can confirm that it leads (our own rule, client-go's `RenewDeadline`):
    once the API server stops answering its renews, it is no longer leading by the end of the renew
    deadline, well before the lease duration after which a standby may take over.
    """
    lease: dict[str, Any] = {"metadata": {"name": "l", "namespace": "ns", "resourceVersion": "1"}, "spec": {}}

    async def lease_api(request: web.Request) -> web.StreamResponse:
        if request.method == "PUT":  # the renew: stored as sent, a new resourceVersion
            lease.update(await request.json())
            lease["metadata"]["resourceVersion"] = str(int(lease["metadata"]["resourceVersion"]) + 1)
        return web.json_response(lease)

    activated = asyncio.Event()

    async def on_started_leading() -> None:
        activated.set()

    fake_api.answer = lease_api
    timing = LeaseTiming(lease_duration_s=30, renew_deadline_s=0.6, retry_period_s=0.05)
    election = LeaderElection(api, "ns", "l", "me", on_started_leading, timing, lambda: datetime.now(UTC))
    running = asyncio.create_task(election.run(), name="leader-election-under-test")
    try:
        async with asyncio.timeout(WAIT_S):
            await election.leading.wait()
        assert activated.is_set() and lease["spec"]["holderIdentity"] == "me", "a free Lease is taken"
        assert fake_api.requests[:2] == [
            "GET /apis/coordination.k8s.io/v1/namespaces/ns/leases/l",
            "PUT /apis/coordination.k8s.io/v1/namespaces/ns/leases/l",
        ]
        fake_api.answer = fake_api.hang  # the API server stops answering
        hung_at = asyncio.get_running_loop().time()
        async with asyncio.timeout(WAIT_S):
            while election.leading.is_set():
                await fake_api.next_request()
        stopped_after_s = asyncio.get_running_loop().time() - hung_at
        assert stopped_after_s < timing.lease_duration_s / 2, "it stops long before a standby may take over"
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)


async def test_a_token_review_the_api_server_never_answers_refuses_the_token(fake_api: FakeApi, api: ApiClient) -> None:
    """The worker API's token check is bounded: a hung TokenReview refuses the call (as for a bad token)."""
    identity = PodIdentity(api, "ns", cast(Any, None), timeout_s=0.2)
    async with asyncio.timeout(WAIT_S):
        assert await identity.task_of("a-projected-token") is None
    assert fake_api.requests == ["POST /apis/authentication.k8s.io/v1/tokenreviews"]


async def test_every_connection_of_the_api_client_sends_tcp_keepalive_probes(
    fake_api: FakeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Our choice: a WATCH whose packets are dropped ends within seconds (the kernel's keepalive), not at
    its read timeout minutes later; every socket `open_api_client` opens comes from `keepalive_socket`."""
    made: list[socket.socket] = []
    factory = client.keepalive_socket

    def recording(addr_info: Any) -> socket.socket:
        made.append(factory(addr_info))
        return made[-1]

    monkeypatch.setattr(client, "keepalive_socket", recording)
    fake_api.answer = status_answer(404)
    api_client = client.open_api_client(Configuration(host=fake_api.url))
    try:
        with pytest.raises(client.NotFound):
            await client.call(client.Apis(api_client).core.read_namespaced_pod, "p", "ns", timeout_s=WAIT_S)
        assert made, "the request's connection came from the keepalive socket factory"
        (sock, *_) = made
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        if hasattr(socket, "TCP_KEEPIDLE"):  # Linux
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == client.KEEPALIVE_IDLE_S
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == client.KEEPALIVE_INTERVAL_S
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == client.KEEPALIVE_PROBES
    finally:
        await close_api_client(api_client)


class _Discard:
    """A `ReflectorSink` that keeps nothing."""

    def listed_page(self, items: Any) -> None:
        return None

    def listed(self, names: set[str]) -> None:
        return None

    def apply_event(self, kind: str, obj: JsonObject) -> None:
        return None


async def test_a_reflector_that_cannot_reach_the_api_server_is_unready_until_it_watches_again(
    fake_api: FakeApi, api: ApiClient
) -> None:
    """Our choice (a gateway's `/readyz`): once the WATCH ends and the API server answers nothing but
    errors for longer than `unreachable_after_s`, the reflector says why it is not ready; as soon as a
    WATCH is open again it is ready. Nothing but the loop's own requests reaches the server."""
    reachable = asyncio.Event()
    reachable.set()
    lost = asyncio.Event()

    async def server(request: web.Request) -> web.StreamResponse:
        if not reachable.is_set():
            return await status_answer(503)(request)
        if request.query.get("watch") != "true":
            return web.json_response({"kind": "List", "items": [], "metadata": {"resourceVersion": "7"}})
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(b"")
        await lost.wait()  # the stream stays open until the test takes the server away
        return response

    fake_api.answer = server
    reflector = Reflector(api, _Discard(), plural="mcptasks", namespace="ns", unreachable_after_s=0.3)
    await reflector.start(timeout_s=WAIT_S)
    try:
        await until(lambda: reflector.watches_started >= 1)
        assert reflector.not_ready_reason() is None
        requests_while_ready = len(fake_api.requests)
        for _ in range(100):  # readiness reads local state only
            assert reflector.ready
        assert len(fake_api.requests) == requests_while_ready

        reachable.clear()
        lost.set()  # the open WATCH ends; every later request is refused
        reason = await until(reflector.not_ready_reason)
        assert "API server unreachable" in reason and "mcptasks" in reason, reason

        lost.clear()
        reachable.set()
        await until(lambda: reflector.ready)
        assert reflector.watches_started >= 2
    finally:
        lost.set()
        await reflector.aclose()
