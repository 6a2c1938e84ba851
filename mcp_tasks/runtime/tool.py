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
import sys
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


class ToolContext:
    """The running tool's view of its execution.

    Attributes:
        arguments: the validated `tools/call` arguments.
        input_responses: answers to the tool's `inputBeforeTask` requests (pre-creation MRTR), by key.
        task_id: the MCP `taskId`, or `None` for a synchronous run.
        attempt: 1 for the first run; higher when an idempotent task was restarted.
    """

    def __init__(
        self, url: str | None = None, token: str | None = None, timeout_s: float = 60.0, retry_s: float = 300.0
    ) -> None:
        self._url = (url or os.environ[contract.ENV_WORKER_URL]).rstrip("/")
        self._token = token or os.environ.get(contract.ENV_WORKER_TOKEN)
        self._token_file = None if self._token else os.environ[contract.ENV_WORKER_TOKEN_FILE]
        self._timeout_s = timeout_s
        self._retry_s = retry_s
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

        Unreachable or 502/503/504 (an operator restarting): retry with backoff (0.5 s doubling to 5 s)
        for up to `retry_s` seconds. Other errors raise `WorkerApiError` at once.
        """
        data = None if body is None else json.dumps(body).encode()
        deadline = time.monotonic() + self._retry_s
        delay = 0.5
        while True:
            request = urllib.request.Request(self._url + path, data=data, method=method)
            request.add_header("Authorization", f"Bearer {self._bearer()}")
            if data is not None:
                request.add_header("Content-Type", "application/json")
            try:
                with urllib.request.urlopen(request, timeout=timeout_s or self._timeout_s) as response:
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
            except (urllib.error.URLError, ConnectionError) as exc:
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

    def report(self, message: str) -> None:
        """Set the task's `statusMessage` (progress for long work; shown on `tasks/get`)."""
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
        minted: dict[str, str] = self._call("POST", contract.PATH_INPUT_REQUESTS, {"inputRequests": dict(requests)})[
            "keys"
        ]
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
        self._call("POST", contract.PATH_RESULT, {"result": result})

    def fail(self, failure: ProtocolFailure) -> None:
        """Post a JSON-RPC error: the task ends `failed`."""
        error: Json = {"code": failure.code, "message": str(failure)}
        if failure.data is not None:
            error["data"] = failure.data
        self._call("POST", contract.PATH_RESULT, {"error": error, "statusMessage": str(failure)})


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
    """
    ctx = ToolContext()
    try:
        not_started = ctx.collect_input_before_task()
        if not_started is not None:
            ctx.finish(text_result(not_started, is_error=True))
            sys.exit(0)
        outcome = main(ctx)
    except ToolError as exc:
        ctx.finish(text_result(str(exc), is_error=True))
        sys.exit(0)
    except ProtocolFailure as exc:
        ctx.fail(exc)
        sys.exit(0)
    try:
        ctx.finish(text_result(outcome) if isinstance(outcome, str) else outcome)
    except WorkerApiError as exc:
        if exc.status != _BAD_REQUEST:
            raise
        # the result itself was refused (not a CallToolResult, or off its outputSchema): say why, cleanly
        ctx.finish(text_result(f"The tool returned an invalid result: {exc.detail}", is_error=True))
    sys.exit(0)
