"""Test-only tools (tests/tools/tools.yaml): one process per call, `tools.py <tool>`."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from mcp_tasks.runtime import ClientLacksCapability, ToolContext, content, contract, run


def sleeper(ctx: ToolContext) -> str:
    seconds = float(ctx.arguments.get("seconds", 1))
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        ctx.report(f"sleeping, {end - time.monotonic():.1f}s left (attempt {ctx.attempt})")
        time.sleep(min(0.1, max(0.0, end - time.monotonic())))
    return f"slept {seconds:g}s on attempt {ctx.attempt}"


def gated(ctx: ToolContext) -> str:
    """Reports once, then waits without a word to the worker API until the file `gate` exists, then answers."""
    ctx.report("waiting for the gate")
    gate = str(ctx.arguments["gate"])
    while not os.path.exists(gate):
        time.sleep(0.05)
    return f"passed the gate on attempt {ctx.attempt}"


def stubborn(ctx: ToolContext) -> str:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ctx.report("ignoring SIGTERM")
    time.sleep(60)
    return "never"


def big_result(ctx: ToolContext) -> dict[str, Any]:
    size = int(ctx.arguments["size"])
    return {"content": [{"type": "text", "text": "x" * size}], "isError": False}


def crasher(ctx: ToolContext) -> str:
    print("about to fail: the disk is on fire", file=sys.stderr, flush=True)
    sys.exit(3)


def asker(ctx: ToolContext) -> str:
    first = ctx.elicit("q", "First question?", {"a": {"type": "string"}})
    second = ctx.elicit("q", "Second question, same suggested key?", {"b": {"type": "string"}})
    return f"{first['content']['a']} {second['content']['b']}"


def _worker_api(method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    """One raw worker-API call as docs/tool-runtime.md describes it for any language (no retries)."""
    token = os.environ.get(contract.ENV_WORKER_TOKEN)
    if not token:
        with open(os.environ[contract.ENV_WORKER_TOKEN_FILE], encoding="utf-8") as file:
            token = file.read().strip()
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(os.environ[contract.ENV_WORKER_URL] + path, data=data, method=method)
    request.add_header("Authorization", f"Bearer {token}")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=contract.MAX_WAIT_MS / 1000 + 30) as response:
        return json.loads(response.read() or b"{}")


def round_resender(ctx: ToolContext) -> str:
    """Sends its round of input requests twice with one `roundId`, as a tool does whose first answer was
    lost (the executor restarted mid-answer), then waits for the answer to the key the first POST got, and
    asks for it once more, as after a lost answer to that GET. Before that, a malformed `roundId` must be
    refused (its status code leads the result)."""
    question = content.form_request("Go on?", {"ok": {"type": "boolean"}}, ["ok"])
    body = {"inputRequests": {"go": question}, "roundId": "resent-round"}
    try:
        _worker_api("POST", contract.PATH_INPUT_REQUESTS, {**body, "roundId": "not an id!"})
        malformed = "accepted"
    except urllib.error.HTTPError as exc:
        malformed = str(exc.code)
    first, second = (_worker_api("POST", contract.PATH_INPUT_REQUESTS, body)["keys"]["go"] for _ in range(2))
    query = f"{contract.PATH_INPUT_RESPONSES}?keys={first}&waitMs="
    while first not in (answers := _worker_api("GET", f"{query}{contract.MAX_WAIT_MS}")["inputResponses"]):
        pass
    again = _worker_api("GET", f"{query}0")["inputResponses"].get(first, {}).get("action", "nothing")
    return f"{malformed} {first} {second} {answers[first]['action']} {again}"


def confirmed(ctx: ToolContext) -> str:
    answer = ctx.input_responses["confirm"]
    return f"confirmed={answer.get('content', {}).get('confirm')} task={ctx.task_id is not None}"


def forker(ctx: ToolContext) -> str:
    """Leaves a child in its own session holding our stderr, then works until cancelled."""
    import subprocess

    child = subprocess.Popen(["sleep", "30"], start_new_session=True)
    ctx.report(f"child {child.pid}")
    time.sleep(60)
    return "never"


def ledger(ctx: ToolContext) -> str:
    """Not idempotent: notes each run's start in a ledger file, works a while, then answers (chaos test)."""
    with open(str(ctx.arguments["ledger"]), "a", encoding="utf-8") as book:
        book.write(f"start {ctx.task_id} {ctx.attempt}\n")
    end = time.monotonic() + float(ctx.arguments.get("seconds", 1))
    while time.monotonic() < end:
        ctx.report(f"working, {end - time.monotonic():.1f}s left")
        time.sleep(min(0.2, max(0.0, end - time.monotonic())))
    return f"done {ctx.task_id}"


def traced(ctx: ToolContext) -> str:
    """Reports the W3C trace context its run was started with (empty without tracing)."""
    ctx.report("looking at my environment")
    return os.environ.get("TRACEPARENT", "")


def bad_structured(ctx: ToolContext) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": "count: many"}], "structuredContent": {"count": "many"}}


def good_structured(ctx: ToolContext) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": "count: 3"}], "structuredContent": {"count": 3}}


def ask_then_work(ctx: ToolContext) -> str:
    word = ctx.elicit("word", "A word?", {"word": {"type": "string"}})["content"]["word"]
    time.sleep(float(ctx.arguments.get("seconds", 0)))
    return f"worked on {word}"


def arguments_digest(ctx: ToolContext) -> str:
    """The length and SHA-256 of its arguments as compact JSON: what the tool received, checkable by the caller."""
    data = json.dumps(ctx.arguments, separators=(",", ":"), ensure_ascii=False).encode()
    return f"{len(data)} bytes sha256={hashlib.sha256(data).hexdigest()}"


def region_echo(ctx: ToolContext) -> str:
    return f"region={ctx.arguments.get('target', {}).get('region')}"


def warm_echo(ctx: ToolContext) -> str:
    """Names the process that served the call (warm workers serve many calls in one process)."""
    for step in range(int(ctx.arguments.get("steps", 0))):
        ctx.progress(step + 1, ctx.arguments["steps"], f"step {step + 1}")
    return f"{ctx.arguments.get('text', '')} pid={os.getpid()} task={ctx.task_id is not None}"


def warm_sleeper(ctx: ToolContext) -> str:
    """Reports every 0.1 s while it sleeps, so a cancel reaches it within 0.1 s (`CallCancelled`).

    With `started` (a path), it creates that file once the call runs, for a test to wait on.
    """
    end = time.monotonic() + float(ctx.arguments.get("seconds", 1))
    ctx.report(f"sleeping in pid {os.getpid()} (attempt {ctx.attempt})")
    if ctx.arguments.get("started"):
        with open(str(ctx.arguments["started"]), "w"):
            pass
    while time.monotonic() < end:
        time.sleep(min(0.1, max(0.0, end - time.monotonic())))
        ctx.report(f"sleeping in pid {os.getpid()} (attempt {ctx.attempt})")
    return f"slept on attempt {ctx.attempt} in pid {os.getpid()}"


def warm_deaf(ctx: ToolContext) -> str:
    """Never looks at its context again: a cancel cannot reach it inside Python."""
    ctx.report(f"deaf in pid {os.getpid()}")
    time.sleep(60)
    return "never"


def warm_late(ctx: ToolContext) -> str:
    """Leaves a thread behind that keeps reporting after the call returned (its events must go nowhere)."""
    import threading

    def heartbeat() -> None:
        for _ in range(20):
            time.sleep(0.005)
            try:
                ctx.report("still here")
            except BaseException:
                return

    threading.Thread(target=heartbeat, daemon=True).start()
    return f"late {ctx.arguments.get('n')}"


def warm_exit(ctx: ToolContext) -> str:
    """Calls sys.exit inside a warm worker."""
    sys.exit(3)


def env_echo(ctx: ToolContext) -> str:
    """Reports the variables named in `names` and the text of the file named by `$CONFIG_FILE`, if any."""
    values = [f"{name}={os.environ.get(name, '<unset>')}" for name in ctx.arguments.get("names", [])]
    path = os.environ.get("CONFIG_FILE")
    if path:
        with open(path, encoding="utf-8") as file:
            values.append(f"file={file.read()}")
    return " ".join(values)


def memory_hog(ctx: ToolContext) -> str:
    """Holds `mebibytes` MiB of memory at once, touched page by page; returns if it could."""
    held = bytearray(int(ctx.arguments["mebibytes"]) * 1024 * 1024)
    for offset in range(0, len(held), 4096):
        held[offset] = 1
    return f"held {len(held) // (1024 * 1024)} MiB"


def kind_asker(ctx: ToolContext) -> str:
    """Asks one input request of the kind `arguments.kind` (form, url, sampling, roots); says what came back."""
    kind = ctx.arguments["kind"]
    try:
        if kind == "sampling":
            answer: Any = ctx.sample("s", [{"role": "user", "content": {"type": "text", "text": "hi"}}], 16)
        elif kind == "roots":
            answer = ctx.list_roots()
        elif kind == "url":
            answer = ctx.elicit_url("u", "Sign in", "https://example.com/sign-in", "sign-in-1")
        else:
            answer = ctx.elicit("f", "Your name?", {"name": {"type": "string"}})
    except ClientLacksCapability as exc:
        return f"refused: {exc.capability}"
    return f"answered: {json.dumps(answer, sort_keys=True)}"


TOOLS: dict[str, Callable[[ToolContext], dict[str, Any] | str]] = {
    "kind_asker": kind_asker,
    "env_echo": env_echo,
    "memory_hog": memory_hog,
    "warm_late": warm_late,
    "warm_exit": warm_exit,
    "warm_echo": warm_echo,
    "warm_sleeper": warm_sleeper,
    "warm_deaf": warm_deaf,
    "warm_asker": ask_then_work,
    "bad_structured": bad_structured,
    "good_structured": good_structured,
    "region_echo": region_echo,
    "arguments_digest": arguments_digest,
    "ask_then_work": ask_then_work,
    "sleeper": sleeper,
    "sleeper_idempotent": sleeper,
    "gated": gated,
    "stubborn": stubborn,
    "short_deadline": sleeper,
    "big_result": big_result,
    "crasher": crasher,
    "asker": asker,
    "short_ttl": sleeper,
    "confirmed": confirmed,
    "round_resender": round_resender,
    "forker": forker,
    "ledger": ledger,
    "traced": traced,
}


def silent() -> None:
    """Exits 0 without posting a result, leaving a termination message (process node) and a stderr line."""
    path = os.environ.get("MCPTASKS_TERMINATION_MESSAGE_PATH")
    if path:
        with open(path, "w", encoding="utf-8") as message:
            message.write("gave up quietly")
    print("gave up quietly", file=sys.stderr)
    sys.exit(0)


if __name__ == "__main__":
    if sys.argv[1] == "silent":
        silent()
    run(TOOLS[sys.argv[1]])
