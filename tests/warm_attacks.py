"""Requests an outsider could send to a warm worker's port, shared by the embedded and Kubernetes tests.

Each goes over a real socket to a real worker process; `refused_requests` returns what the worker
answered, and the tests assert through a side effect (the `warm_sleeper` tool creates its `started`
file when it runs) that no tool code ran for any of them.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from mcp_tasks.runtime import contract
from mcp_tasks.worker.warm_auth import WarmCallSigner, new_private_pem

UNAUTHORIZED = {"message": "unauthorized"}
CALLER = "a" * 32


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


async def refused_requests(
    session: aiohttp.ClientSession, base_url: str, signer: WarmCallSigner, tool: str, marker: Path
) -> dict[str, Answer]:
    """Every kind of request the worker must refuse, by name, with what it answered."""
    forger = WarmCallSigner.from_pem(new_private_pem())
    body = call_body(tool, "outsider-1", marker, seconds=30)
    other_body = call_body(tool, "outsider-2", marker, seconds=30)
    past = time.time() - 3600
    token = signer.mint(tool, "outsider-1", "call", CALLER, body)
    attempts: dict[str, tuple[bytes, list[str] | None]] = {
        "unauthenticated": (body, None),
        "malformed": (body, ["Bearer not.a.jwt"]),
        "basic scheme": (body, ["Basic dXNlcjpwYXNz"]),
        "forged": (body, bearer(forger.mint(tool, "outsider-1", "call", CALLER, body))),
        "expired": (body, bearer(signer.mint(tool, "outsider-1", "call", CALLER, body, now_s=past))),
        "other tool": (body, bearer(signer.mint("warm_echo", "outsider-1", "call", CALLER, body))),
        "other call": (other_body, bearer(token)),
        "other body": (call_body(tool, "outsider-1", marker, seconds=31), bearer(token)),
        "a cancel's credential": (body, bearer(signer.mint(tool, "outsider-1", "cancel", CALLER))),
        "two credentials": (body, [*bearer(token), *bearer(token)]),
    }
    answers = {name: await post(session, base_url, data, auth) for name, (data, auth) in attempts.items()}
    async with session.delete(f"{base_url}{contract.PATH_CALLS}/outsider-1") as response:
        answers["unauthenticated cancel"] = Answer(response.status, await response.json())
    async with session.get(f"{base_url}{contract.PATH_CALLS}/outsider-1?waitSeconds=0") as response:
        answers["unauthenticated re-attach"] = Answer(response.status, await response.json())
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
