"""What a tool author imports: read arguments, report progress, ask for input, finish with a result.

Standard library only, so it works in any container with Python 3.11+. Talks to the worker API
named by the environment (`contract`). A tool written with it runs unchanged under the embedded
runner and the Kubernetes operator.

Example:
    from mcp_tasks.runtime import ToolContext, run

    def main(ctx: ToolContext) -> str:
        answer = ctx.elicit("name", "Please enter your name.", {"name": {"type": "string"}})
        return f"Hello, {answer['content']['name']}!"

    run(main)
"""

from __future__ import annotations

import json
import os
import secrets
import ssl
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from mcp_tasks.runtime import content, contract

Json = dict[str, Any]


class ToolError(Exception):
    """Raise to finish with a tool error: `completed` with `isError: true` and this message (SEP-1303)."""


class ProtocolFailure(Exception):
    """Raise to finish `failed` with a JSON-RPC error `{code, message}` (an infrastructure-level failure)."""

    def __init__(self, message: str, code: int = -32603, data: Json | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.data = data


class ClientLacksCapability(ToolError):
    """The client that created the task did not declare the capability an input request needs.

    Raised by `ToolContext.ask` (and `elicit`) before anything is asked, or, for a legacy-era
    (2025-11-25) client whose capabilities the stateless server cannot know, when that client answered
    the request with "method not found" / "not supported". As a `ToolError` it ends the task `completed`
    with `isError: true` and a message saying what the client must declare, unless the tool catches it
    and does without the input.

    `capability` names what was missing (`elicitation`, `elicitation.url`, `elicitation.form`, `sampling`,
    `roots`), or is `None` when a legacy-era client refused without saying.
    """

    def __init__(self, message: str, capability: str | None = None) -> None:
        super().__init__(message)
        self.capability = capability


class InputRequestFailed(ToolError):
    """An input request could not be asked or answered: the server holds too many calls waiting for input
    (worker API 429), or a legacy-era client answered it with a JSON-RPC error other than "not supported".
    """


class WorkerApiError(RuntimeError):
    """The worker API refused a call (HTTP status and its message)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"worker API answered {status}: {message}")
        self.status = status
        self.detail = message


class CallCancelled(BaseException):
    """Raised by any `ToolContext` call of a warm-served call once that call was cancelled or passed its
    maximum run time (`ToolContext.cancelled` is then true). A `BaseException`, like `KeyboardInterrupt`,
    so that `except Exception` in a tool does not swallow it; let it propagate (clean up in `finally`).
    """


class InputRoundsUnavailable(BaseException):
    """Raised by `ToolContext.ask` in a warm-served call that names no worker API to ask through (a
    synchronous call sent straight to a warm worker). The executor runs the call again as a task that
    can take input rounds, when the tool is idempotent. Let it propagate.
    """


EventSink = Callable[[Json], None]
"""Where a warm-served call's events go (`contract.PATH_CALLS`): one JSON object per event."""


class ToolContext:
    """The running tool's view of its execution.

    One-shot (the default): built from the environment, it reads its input from the worker API.
    Warm-served (`runtime.serve`): built per call from the call's `start` body; status, progress and the
    outcome go to `events`, and only input requests use the worker API (`url`, when the call names one).

    Attributes:
        arguments: the validated `tools/call` arguments.
        input_responses: answers to the tool's `inputBeforeTask` requests (pre-creation MRTR), by key.
        task_id: the MCP `taskId`, or `None` for a synchronous run.
        attempt: 1 for the first run; higher when an idempotent task was restarted.
    """

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        timeout_s: float = 60.0,
        retry_s: float = 300.0,
        *,
        start: Json | None = None,
        events: EventSink | None = None,
        cancelled: threading.Event | None = None,
    ) -> None:
        self._events = events
        self._cancelled = cancelled
        self.outcome: Json | None = None
        """Warm-served only: the `/result` body `finish` or `fail` recorded."""
        if start is None and not url and os.environ.get(contract.ENV_SERVE_PORT):
            raise RuntimeError(
                "this process is a warm worker (spec.warm sets MCPTASKS_SERVE_PORT): it takes many calls, so build "
                "no ToolContext yourself; use run(main), or serve the warm-worker API (docs/tool-runtime.md §7)"
            )
        if start is None:
            url = url or os.environ[contract.ENV_WORKER_URL]
            token = token or os.environ.get(contract.ENV_WORKER_TOKEN)
        self._url = url.rstrip("/") if url else None
        self._token = token
        self._token_file = None if token or start is not None else os.environ[contract.ENV_WORKER_TOKEN_FILE]
        self._timeout_s = timeout_s
        self._retry_s = retry_s
        ca_file = os.environ.get(contract.ENV_WORKER_CA_FILE)
        # An https worker URL is verified (hostname and chain); against the given CA when there is one.
        self._tls = ssl.create_default_context(cafile=ca_file) if ca_file else None
        if start is None:
            start = self._call("GET", contract.PATH_INPUT)
        self.arguments: Json = start.get("arguments") or {}
        self.input_responses: Json = start.get("inputResponses") or {}
        self.task_id: str | None = start.get("taskId")
        self.attempt: int = int(start.get("attempt") or 1)
        self._unanswered_before_task: Json = start.get("inputBeforeTask") or {}

    def collect_input_before_task(self) -> str | None:
        """Ask, in-task, the `inputBeforeTask` requests the task was created without; `run` calls it.

        Only a legacy-era client's call starts so (it has no pre-creation round). Their answers join
        `input_responses`, as if given before the task. Returns why the tool must not start (a request was
        declined or cancelled, which never reaches the tool), else `None`.

        Raises:
            ClientLacksCapability, InputRequestFailed: as `ask`.
        """
        if not self._unanswered_before_task:
            return None
        answers = self.ask(dict(self._unanswered_before_task))
        self.input_responses = {**self.input_responses, **answers}
        declined = [key for key, answer in answers.items() if answer.get("action") in {"decline", "cancel"}]
        return f"Not started: the request for {', '.join(declined)} was declined" if declined else None

    def _call(self, method: str, path: str, body: Json | None = None, timeout_s: float | None = None) -> Json:
        """One worker-API call, retried while the server cannot be reached.

        Unreachable, no answer within the timeout, or 502/503/504 (an operator restarting): retry the same
        request with backoff (0.5 s doubling to 5 s) for up to `retry_s` seconds. Repeating a call does
        no harm: a round of input requests carries its `roundId`, a taken answer is handed out again, and
        a second result is refused (409).
        Other errors raise `WorkerApiError` at once.
        """
        self._check_cancelled()
        if self._url is None:
            raise InputRoundsUnavailable(f"no worker API to call {path} on (a synchronous warm call)")
        data = None if body is None else json.dumps(body).encode()
        deadline = time.monotonic() + self._retry_s
        delay = 0.5
        while True:
            request = urllib.request.Request(self._url + path, data=data, method=method)
            request.add_header("Authorization", f"Bearer {self._bearer()}")
            if data is not None:
                request.add_header("Content-Type", "application/json")
            try:
                with urllib.request.urlopen(
                    request, timeout=timeout_s or self._timeout_s, context=self._tls
                ) as response:
                    payload = response.read()
                return json.loads(payload) if payload else {}
            except urllib.error.HTTPError as exc:
                detail = exc.read().decode("utf-8", "replace")
                if exc.code == _PRECONDITION_FAILED and path == contract.PATH_INPUT_REQUESTS:
                    try:
                        refusal = json.loads(detail)
                    except ValueError:
                        refusal = {"message": detail}
                    raise ClientLacksCapability(str(refusal.get("message")), refusal.get("capability")) from exc
                if exc.code == _TOO_MANY_REQUESTS and path == contract.PATH_INPUT_REQUESTS:
                    raise InputRequestFailed(f"The input could not be asked: {detail}") from exc
                if exc.code not in _UNAVAILABLE or time.monotonic() + delay > deadline:
                    raise WorkerApiError(exc.code, detail) from exc
            except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
                if isinstance(getattr(exc, "reason", None), ssl.SSLCertVerificationError):
                    raise WorkerApiError(495, f"the worker API's certificate is not trusted: {exc}") from exc
                if time.monotonic() + delay > deadline:
                    raise WorkerApiError(503, f"worker API unreachable: {exc}") from exc
            time.sleep(delay)
            delay = min(delay * 2, 5.0)

    def _bearer(self) -> str:
        """The worker token: given, or read from its file each time (a projected token is rotated)."""
        if self._token:
            return self._token
        assert self._token_file is not None
        with open(self._token_file, encoding="utf-8") as file:
            return file.read().strip()

    @property
    def cancelled(self) -> bool:
        """True once this warm-served call was cancelled or passed its deadline (then every other call
        raises `CallCancelled`). A one-shot run is stopped with SIGTERM instead, and reads False.
        """
        return self._cancelled is not None and self._cancelled.is_set()

    def _check_cancelled(self) -> None:
        if self.cancelled:
            raise CallCancelled("the call was cancelled")

    def _emit(self, event: Json) -> bool:
        """Send a warm-served call's event; False for a one-shot run (use the worker API instead)."""
        if self._events is None:
            return False
        self._check_cancelled()
        self._events(event)
        return True

    def report(self, message: str) -> None:
        """Set the task's `statusMessage` (progress for long work; shown on `tasks/get`)."""
        if not self._emit({"event": "status", "statusMessage": message}):
            self._call("POST", contract.PATH_STATUS, {"statusMessage": message})

    def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        """Report progress once, for every kind of caller.

        A task shows it as its `statusMessage` (`message`, or "`progress` of `total`"); a synchronous
        call whose client sent a `progressToken` gets `notifications/progress {progress, total, message}`.
        `progress` should grow with each report; `total` is optional (unknown).
        """
        body: Json = {"progress": progress}
        if total is not None:
            body["total"] = total
        if message is not None:
            body["message"] = message
        if not self._emit({"event": "progress", **body}):
            self._call("POST", contract.PATH_PROGRESS, body)

    def ask(self, requests: Mapping[str, Json]) -> dict[str, Json]:
        """Issue input requests and block until every one is answered.

        Args:
            requests: suggested key → bare input request `{method, params}`. The server mints the real
                keys (never reusing one within the task's life).

        Returns:
            suggested key → the client's response (e.g. an `ElicitResult` `{action, content?}`).

        Raises:
            ClientLacksCapability: the client that created the task did not declare the capability a
                request needs (`elicitation`, `elicitation.url`, `sampling`, `roots`); nothing was asked.
                It is a `ToolError`: unless the tool catches it, the task completes with `isError: true`
                and this message, which says what the client must declare.
            WorkerApiError: 409 when the caller cannot take input rounds (a legacy-era synchronous call).
        """
        # One id per round, sent again by `_call`'s retries: a retry after a lost answer gets the same keys.
        body = {"inputRequests": dict(requests), "roundId": secrets.token_urlsafe(12)}
        minted: dict[str, str] = self._call("POST", contract.PATH_INPUT_REQUESTS, body)["keys"]
        by_key = {key: suggested for suggested, key in minted.items()}
        answers: dict[str, Json] = {}
        while len(answers) < len(by_key):
            waiting = [key for key in by_key if by_key[key] not in answers]
            query = urllib.parse.urlencode({"keys": ",".join(waiting), "waitMs": contract.MAX_WAIT_MS})
            got = self._call(
                "GET", f"{contract.PATH_INPUT_RESPONSES}?{query}", timeout_s=contract.MAX_WAIT_MS / 1000 + 30
            )
            for key, response in (got.get("inputResponses") or {}).items():
                if key in by_key:
                    answers[by_key[key]] = response
        for suggested, answer in answers.items():
            _raise_if_refused(str(requests[suggested].get("method")), answer)
        return answers

    def elicit(self, key: str, message: str, properties: Json, required: list[str] | None = None) -> Json:
        """Ask the user for a form (`elicitation/create`, form mode) and return the `ElicitResult`.

        Raises:
            ClientLacksCapability: the client did not declare `elicitation` (or declared only URL mode).
        """
        return self.ask({key: content.form_request(message, properties, required)})[key]

    def elicit_url(self, key: str, message: str, url: str, elicitation_id: str) -> Json:
        """Send the user to `url` (`elicitation/create`, URL mode) and return the `ElicitResult`.

        Raises:
            ClientLacksCapability: the client did not declare `elicitation.url`.
        """
        return self.ask({key: content.url_request(message, url, elicitation_id)})[key]

    def sample(self, key: str, messages: list[Json], max_tokens: int, **params: Any) -> Json:
        """Ask the client's model (`sampling/createMessage`) and return the `CreateMessageResult`.

        Raises:
            ClientLacksCapability: the client did not declare `sampling`.
        """
        return self.ask({key: content.sampling_request(messages, max_tokens, **params)})[key]

    def list_roots(self, key: str = "roots") -> list[Json]:
        """Ask the client for its roots (`roots/list`) and return them (`[{uri, name?}]`).

        Raises:
            ClientLacksCapability: the client did not declare `roots`.
        """
        roots = self.ask({key: content.roots_request()})[key].get("roots")
        return list(roots) if isinstance(roots, list) else []

    def finish(self, result: Json) -> None:
        """Post the final `CallToolResult` (`{content, structuredContent?, isError?}`)."""
        self._finish({"result": result})

    def fail(self, failure: ProtocolFailure) -> None:
        """Post a JSON-RPC error: the task ends `failed`."""
        error: Json = {"code": failure.code, "message": str(failure)}
        if failure.data is not None:
            error["data"] = failure.data
        self._finish({"error": error, "statusMessage": str(failure)})

    def _finish(self, body: Json) -> None:
        if self._events is not None:
            self.outcome = body  # the serve loop sends it as the call's final event
        else:
            self._call("POST", contract.PATH_RESULT, body)


def _raise_if_refused(method: str, answer: Json) -> None:
    """Turn a legacy client's JSON-RPC error answer (`{"error": {code, message}}`) into an exception.

    Raises:
        ClientLacksCapability: -32601 (no handler for `method`), or a message saying it is not supported.
        InputRequestFailed: any other error the client answered.
    """
    error = answer.get("error") if isinstance(answer, dict) and set(answer) == {"error"} else None
    if not isinstance(error, dict):
        return
    code, message = error.get("code"), str(error.get("message", ""))
    if code == _METHOD_NOT_FOUND or "not supported" in message.lower():
        raise ClientLacksCapability(
            f"The client cannot answer {method} ({message or code}); connect with a client that declares it"
        )
    raise InputRequestFailed(f"The client answered {method} with error {code}: {message}")


_METHOD_NOT_FOUND = -32601
_UNAVAILABLE = frozenset({502, 503, 504})
_PRECONDITION_FAILED = 412
_TOO_MANY_REQUESTS = 429
_BAD_REQUEST = 400


def text_result(text: str, is_error: bool = False) -> Json:
    """A `CallToolResult` with one text block."""
    return {"content": [{"type": "text", "text": text}], "isError": is_error}


def run(main: Callable[[ToolContext], Json | str]) -> NoReturn:
    """Run a tool: build the context, call `main`, post what it returns, exit.

    `main` returns a `CallToolResult` dict or a plain string (one text block). `ToolError` finishes with
    `isError: true`; `ProtocolFailure` finishes `failed`. Any other exception escapes (non-zero exit):
    the executor then reports `isError: true` with the tail of stderr.

    With `MCPTASKS_SERVE_PORT` set (a warm worker, `spec.warm`) it serves calls one after another
    instead (`runtime.serve.serve`), with the same outcome rules per call; the same `main` works in both.
    """
    if os.environ.get(contract.ENV_SERVE_PORT):
        from mcp_tasks.runtime.serve import serve

        serve(main)
    ctx = ToolContext()
    body = call_main(main, ctx)
    try:
        ctx._finish(body)
    except WorkerApiError as exc:
        if exc.status != _BAD_REQUEST or "result" not in body:
            raise
        # the result itself was refused (not a CallToolResult, or off its outputSchema): say why, cleanly
        ctx.finish(text_result(f"The tool returned an invalid result: {exc.detail}", is_error=True))
    sys.exit(0)


def call_main(main: Callable[[ToolContext], Json | str], ctx: ToolContext) -> Json:
    """Run `main` once and return the `/result` body it ends with: `{"result"}` or `{"error", "statusMessage"}`.

    The `inputBeforeTask` requests a legacy-era call's task was created without are asked first.
    `ToolError` → `{"result"}` with `isError: true`; `ProtocolFailure` → `{"error"}`; a result the tool
    posted itself (`ctx.finish`, warm-served) wins over its return value. Other exceptions propagate.
    """
    try:
        not_started = ctx.collect_input_before_task()
        if not_started is not None:
            return {"result": text_result(not_started, is_error=True)}
        outcome = main(ctx)
    except ToolError as exc:
        return {"result": text_result(str(exc), is_error=True)}
    except ProtocolFailure as exc:
        error: Json = {"code": exc.code, "message": str(exc)}
        if exc.data is not None:
            error["data"] = exc.data
        return {"error": error, "statusMessage": str(exc)}
    if ctx.outcome is not None:
        return ctx.outcome
    return {"result": text_result(outcome) if isinstance(outcome, str) else outcome}
