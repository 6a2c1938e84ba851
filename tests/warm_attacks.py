"""Requests an outsider could send to a warm worker's port, shared by the embedded and Kubernetes tests.

Each goes over a real socket to a real worker process; `refused_requests` returns what the worker
answered, and the tests assert through a side effect (the `warm_sleeper` tool creates its `started`
file when it runs) that no tool code ran for any of them.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from mcp_tasks.runtime import call_auth, contract
from mcp_tasks.worker.warm_auth import WarmCallSigner, WarmSession, new_private_pem

UNAUTHORIZED = {"message": "unauthorized"}
CALLER = "a" * 32
X25519_KEY = call_auth.b64url(X25519PrivateKey.generate().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))
"""Some other worker's session key."""


def call_body(tool: str, execution_id: str, marker: Path, seconds: float = 0.0) -> bytes:
    """A `POST /v1/calls` body of `warm_sleeper` that creates `marker` once it runs."""
    arguments = {"seconds": seconds, "started": str(marker)}
    return json.dumps({"executionId": execution_id, "tool": tool, "arguments": arguments}).encode()


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: Any


async def post(
    session: aiohttp.ClientSession, base_url: str, data: bytes, authorization: list[str] | None = None
) -> Answer:
    headers = [("Content-Type", "application/json"), *[("Authorization", value) for value in authorization or []]]
    async with session.post(base_url + contract.PATH_CALLS, data=data, headers=headers) as response:
        text = await response.text()
        if response.status != 200:
            return Answer(response.status, json.loads(text))
        events = [json.loads(line) for line in text.splitlines() if line.strip()]
        return Answer(200, events[-1])


def bearer(token: str) -> list[str]:
    return [f"Bearer {token}"]


async def post_offer(session: aiohttp.ClientSession, base_url: str, offer: str) -> Answer:
    """`POST /v1/sessions` with `offer`: 204 (opened, body `None`) or the refusal."""
    headers = {"Authorization": f"Bearer {offer}"}
    async with session.post(base_url + contract.PATH_SESSIONS, headers=headers) as response:
        return Answer(response.status, None if response.status == 204 else await response.json())


async def worker_key(session: aiohttp.ClientSession, base_url: str) -> str:
    """The worker's session key (`GET /v1/sessions`), which anyone may read."""
    async with session.get(base_url + contract.PATH_SESSIONS) as response:
        assert response.status == 200
        return str((await response.json())["workerKey"])


async def refused_requests(
    session: aiohttp.ClientSession, base_url: str, signer: WarmCallSigner, tool: str, marker: Path
) -> dict[str, Answer]:
    """Every kind of request the worker must refuse, by name, with what it answered.

    Calls and their credentials: each attempt gets a fresh credential of a real session `signer` opened,
    so it is refused for the one reason it names. Sessions: offers the worker must not open.
    """
    forger = WarmCallSigner.from_pem(new_private_pem())
    warm = await signer.open_session(session, base_url, tool)
    key = await worker_key(session, base_url)
    body = call_body(tool, "outsider-1", marker, seconds=30)
    other_body = call_body(tool, "outsider-2", marker, seconds=30)
    past = time.time() - 3600

    def credential(operation: str = "call", data: bytes | None = body, **kwargs: Any) -> list[str]:
        return bearer(warm.credential(operation, "outsider-1", CALLER, data, **kwargs))

    guessed_key = WarmSession(tool, base_url, warm.session_id, secrets.token_bytes(32), warm.expires_at)
    unknown = WarmSession(tool, base_url, "no-such-session", warm.key, warm.expires_at)
    other_worker, _ = signer.offer(tool, base_url, X25519_KEY)
    attempts: dict[str, tuple[bytes, list[str] | None]] = {
        "unauthenticated": (body, None),
        "malformed": (body, ["Bearer not.a.credential"]),
        "basic scheme": (body, ["Basic dXNlcjpwYXNz"]),
        "forged (a guessed session key)": (body, bearer(guessed_key.credential("call", "outsider-1", CALLER, body))),
        "unknown session": (body, bearer(unknown.credential("call", "outsider-1", CALLER, body))),
        "another worker's session": (body, bearer(other_worker.credential("call", "outsider-1", CALLER, body))),
        "expired": (body, credential(now_s=past)),
        "too long-lived": (body, credential(lifetime_s=3600)),
        "other call": (other_body, credential()),
        "other body": (call_body(tool, "outsider-1", marker, seconds=31), credential()),
        "a cancel's credential": (body, credential("cancel", None)),
        "two credentials": (body, [*credential(), *credential()]),
        "an offer as a credential": (body, bearer(signer.offer(tool, base_url, key)[1])),
    }
    answers = {name: await post(session, base_url, data, auth) for name, (data, auth) in attempts.items()}
    async with session.delete(f"{base_url}{contract.PATH_CALLS}/outsider-1") as response:
        answers["unauthenticated cancel"] = Answer(response.status, await response.json())
    async with session.get(f"{base_url}{contract.PATH_CALLS}/outsider-1?waitSeconds=0") as response:
        answers["unauthenticated re-attach"] = Answer(response.status, await response.json())
    _, replayed = signer.offer(tool, base_url, key)
    assert (await post_offer(session, base_url, replayed)).status == 204
    offers = {
        "forged offer (another key)": forger.offer(tool, base_url, key)[1],
        "offer for another tool": signer.offer("warm_echo", base_url, key)[1],
        "offer for another worker": signer.offer(tool, base_url, X25519_KEY)[1],
        "expired offer": signer.offer(tool, base_url, key, now_s=past - contract.SESSION_MAX_LIFETIME_S)[1],
        "offer for over an hour": signer.offer(tool, base_url, key, lifetime_s=7200)[1],
        "replayed offer": replayed,
    }
    for name, offer in offers.items():
        answers[name] = await post_offer(session, base_url, offer)
    return answers


async def squat(session: aiohttp.ClientSession, base_url: str, tool: str, marker: Path, count: int) -> list[int]:
    """`count` concurrent calls without a credential, each asking for a long run: the statuses answered."""

    async def one(index: int) -> int:
        return (await post(session, base_url, call_body(tool, f"squat-{index}", marker, seconds=60))).status

    return list(await asyncio.gather(*(one(index) for index in range(count))))


async def health(session: aiohttp.ClientSession, base_url: str) -> Answer:
    """`/healthz`, which stays open."""
    async with session.get(base_url + contract.PATH_HEALTH) as response:
        return Answer(response.status, await response.json())
