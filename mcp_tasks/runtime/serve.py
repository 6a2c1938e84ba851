"""The warm-worker serve loop: one long-lived process takes a tool's calls one after another.

`run(main)` switches to `serve(main)` when `MCPTASKS_SERVE_PORT` is set (an McpTool with `spec.warm`),
so the same tool code runs one-shot and warm. Each call arrives as `POST /v1/calls`, runs `main` in its
own thread with its own `ToolContext`, and answers with an NDJSON stream of events whose last line is
the outcome (`contract.PATH_CALLS`). Per call, the outcome rules are `run`'s.

Stops keep their meaning: `DELETE /v1/calls/{executionId}` (or the caller closing the stream, or the
call passing `maxRunTimeSeconds`) makes every further `ToolContext` call raise `CallCancelled`; a call
still running `cancelGraceSeconds` later cannot be stopped inside Python, so the whole worker exits
(code 75) and its executor starts a fresh one. SIGTERM drains: no new calls, exit when the last ends.

A call sent with `detachSeconds` > 0 (a task's run under an embedded runner that can adopt it) outlives
its caller instead: when the caller's connection ends (its server crashed) the call runs on, its events
are dropped, and its final event is kept `detachSeconds` after the call ends, for a restarted runner to
fetch with `GET /v1/calls/{executionId}` (re-attach by execution id). A worker whose parent died takes
no new calls and exits once no call runs and no kept outcome waits for its runner.

Every request to `/v1/calls` carries a credential an executor holding the warm-call key minted
(`call_auth`, `contract.PATH_CALLS`): an HMAC keyed with a session that executor opened on this very
worker (`contract.PATH_SESSIONS`, an offer signed with its key), checked before the body is read or any
call is touched. Anyone else who can reach the port gets 401 and the connection closed, so no tool code
runs, no slot is taken and no call is cancelled or read for them. A re-attach or cancel must also come
from the call's caller. `/healthz` and `GET /v1/sessions` (the worker's public session key) stay open.

With `MCPTASKS_SERVE_TLS_CERT_FILE` and `_KEY_FILE` (Kubernetes, the chart's `tls.warmWorkers`) the worker
serves HTTPS only; each connection's handshake runs in its own thread, bounded, and a caller's departure
is seen below the TLS layer (`_Call.caller_gone`).

The standard library (`http.server`, `ssl`) plus `call_auth` for that check.
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import ssl
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final, NoReturn
from urllib.parse import parse_qs

from mcp_tasks.runtime import contract
from mcp_tasks.runtime.call_auth import CallVerifier
from mcp_tasks.runtime.tool import (
    CallCancelled,
    InputRoundsUnavailable,
    Json,
    ToolContext,
    call_main,
)

Main = Callable[[ToolContext], Json | str]

EXIT_STUCK_CALL: Final = 75
"""Exit code of a worker that stopped itself because a call ignored its cancel past the grace period."""
_WATCH_S: Final = 0.1
_IDLE_WATCH_S: Final = 1.0
_MAX_BODY_BYTES: Final = 64 * 1024 * 1024
_HANDSHAKE_TIMEOUT_S: Final = 10.0
_REQUEST_HEAD_TIMEOUT_S: Final = 30.0
"""Longest wait for a request's line and headers, in seconds (a new connection's first request, or the next on
a kept-alive one): a silent or slow client frees its thread. Above the 15 s for which the executors' HTTP
clients keep an idle connection, so they never send on one this worker has just closed."""
_MAX_CONNECTIONS: Final = 256
"""Connections served at once (a thread each); one more is closed at once. The executors use one per call in
flight, far fewer; without it, unauthenticated connections could take every thread the process may start."""
_TLS_ALERT: Final = b"\x15"
"""The content type of a TLS alert record (RFC 8446 §5.1), as its first byte on the wire."""
_CRASH_TAIL_CHARS: Final = 4096
_MAX_KEPT_OUTCOMES: Final = 1024
"""Final events of detached calls kept for their runners at most (the oldest go first)."""
_MAX_REATTACH_WAIT_S: Final = 10.0


@dataclass(slots=True)
class _Call:
    """One call in flight: its cancel flag and the times it must stop by (monotonic seconds)."""

    execution_id: str
    deadline: float
    grace_s: float
    caller: str = ""  # the credential's `sub`: only it may re-attach to or cancel the call
    cancelled: threading.Event = field(default_factory=threading.Event)
    stop_by: float | None = None
    connection: socket.socket | None = None  # the caller's; its end means the caller is gone
    detach_s: float = 0.0  # > 0: the call outlives its caller, its outcome kept this long after it ends
    detached: bool = False

    def caller_gone(self) -> bool:
        """Whether the caller closed its connection (peeked without blocking; never consumes a byte).

        A TLS connection is peeked below its TLS layer (`SSLSocket.recv` takes no flags): its end, or a TLS
        alert record (`close_notify`; a caller sends nothing else while its call runs), means the caller left.
        """
        if self.connection is None:
            return False
        try:
            peeked = socket.socket.recv(self.connection, 1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True
        return peeked == b"" or (isinstance(self.connection, ssl.SSLSocket) and peeked == _TLS_ALERT)

    def cancel(self, now: float) -> None:
        self.cancelled.set()
        if self.stop_by is None:
            self.stop_by = now + self.grace_s

    def lose_caller(self, now: float) -> None:
        """The caller is gone: a detachable call runs on for a runner to re-attach; any other stops."""
        if self.detach_s > 0:
            self.detached = True
        else:
            self.cancel(now)


class WarmServer(ThreadingHTTPServer):
    """The worker's HTTP server: `main`, the calls in flight, the concurrency bound."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = socket.SOMAXCONN
    """The listen backlog: `socketserver`'s default of 5 drops the SYNs of a burst of connections (the
    executors' calls, or a client's idle ones), which then wait out the kernel's retransmit back-off (1 s, 3 s,
    7 s...) before the accept loop sees them."""

    def __init__(
        self,
        address: tuple[str, int],
        main: Main,
        concurrency: int,
        verifier: CallVerifier,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(address, _Handler)
        self.tls = tls
        self.main = main
        self.verifier = verifier
        self.concurrency = concurrency
        self.calls: dict[str, _Call] = {}
        self.lock = threading.Lock()
        self.draining = False
        self.idle = threading.Condition(self.lock)
        # execution id → (final event, monotonic time after which nobody will fetch it, caller)
        self.kept: dict[str, tuple[Json, float, str]] = {}
        self.connections = threading.BoundedSemaphore(_MAX_CONNECTIONS)

    def process_request(self, request: Any, client_address: Any) -> None:
        """Serve the connection in a thread of its own, unless `_MAX_CONNECTIONS` are served: then close it."""
        if not self.connections.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.connections.release()  # its thread never started
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        """One connection's thread (`ThreadingMixIn`); gives its place back when it ends."""
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.connections.release()

    def get_request(self) -> tuple[socket.socket, Any]:
        """Accept a connection; with TLS, wrapped without its handshake, which `finish_request` does in the
        connection's own thread (a slow or silent client never holds up the accept loop).
        """
        connection, address = super().get_request()
        if self.tls is not None:
            connection = self.tls.wrap_socket(connection, server_side=True, do_handshake_on_connect=False)
        return connection, address

    def finish_request(self, request: Any, client_address: Any) -> None:
        """Serve one connection, after its TLS handshake (bounded by `_HANDSHAKE_TIMEOUT_S`) when there is one."""
        if isinstance(request, ssl.SSLSocket):
            request.settimeout(_HANDSHAKE_TIMEOUT_S)
            try:
                request.do_handshake()
            except (OSError, ssl.SSLError):  # a plain-HTTP or untrusting client: nothing to answer
                return
            request.settimeout(None)
        super().finish_request(request, client_address)

    def admit(self, call: _Call) -> bool:
        """Register `call` unless the worker is full, draining or already runs that execution."""
        with self.lock:
            if self.draining or len(self.calls) >= self.concurrency or call.execution_id in self.calls:
                return False
            self.calls[call.execution_id] = call
            return True

    def leave(self, call: _Call, final: Json | None = None) -> None:
        """Forget `call`; keep its `final` event for a re-attaching runner when it is detachable."""
        with self.lock:
            self.calls.pop(call.execution_id, None)
            if final is not None and call.detach_s > 0:
                while len(self.kept) >= _MAX_KEPT_OUTCOMES:
                    self.kept.pop(next(iter(self.kept)))
                self.kept[call.execution_id] = (final, time.monotonic() + call.detach_s, call.caller)
            self.idle.notify_all()

    def reattach(self, execution_id: str, caller: str, wait_s: float) -> tuple[str, Json | None]:
        """`("final", event)` of a call that ended (handed over once), `("running", None)` while it still
        runs after `wait_s` seconds, `("unknown", None)` when this worker knows no such call of `caller`.
        """
        deadline = time.monotonic() + wait_s
        with self.lock:
            while True:
                kept = self.kept.get(execution_id)
                if kept is not None and kept[2] == caller:
                    del self.kept[execution_id]
                    return "final", kept[0]
                call = self.calls.get(execution_id)
                if call is None or call.caller != caller:
                    return "unknown", None
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return "running", None
                self.idle.wait(remaining)

    def watch(self, parent_pid: int | None) -> NoReturn:
        """Enforce deadlines and grace periods; exit when the parent (embedded runner) is gone."""
        while True:
            with self.lock:
                busy = bool(self.calls)
            time.sleep(_WATCH_S if busy else _IDLE_WATCH_S)  # idle: only the parent to watch
            now = time.monotonic()
            with self.lock:
                calls = list(self.calls.values())
            for call in calls:
                if now >= call.deadline:
                    call.cancel(now)
                elif not call.cancelled.is_set() and not call.detached and call.caller_gone():
                    call.lose_caller(now)
                if call.stop_by is not None and now >= call.stop_by:
                    sys.stderr.write(
                        f"mcp-tasks warm worker: call {call.execution_id} did not stop {call.grace_s:g}s after its "
                        "cancel or deadline; exiting so that a fresh worker takes the next calls\n"
                    )
                    sys.stderr.flush()
                    os._exit(EXIT_STUCK_CALL)
            with self.lock:
                self.kept = {key: kept for key, kept in self.kept.items() if kept[1] > now}
                waited_for = bool(self.calls or self.kept)
            if parent_pid is not None and not _alive(parent_pid):
                # the runner that started us is gone: no new calls; a detached call's outcome waits for the
                # restarted runner to re-attach (or for its keep time to pass)
                with self.lock:
                    self.draining = True
                if not waited_for:
                    os._exit(0)


class _Handler(BaseHTTPRequestHandler):
    server: WarmServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # small event lines must not wait for the caller's delayed ACK

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: one line per call would drown the tool's own stderr."""

    def handle_one_request(self) -> None:
        """One request; its line and headers must arrive within `_REQUEST_HEAD_TIMEOUT_S` (the standard
        library then closes the connection), and nothing after them is timed (a call streams for as long as
        its tool runs; its body is read only once its credential was checked).
        """
        self.connection.settimeout(_REQUEST_HEAD_TIMEOUT_S)
        super().handle_one_request()

    def parse_request(self) -> bool:
        """The standard parse; the head has arrived, so the connection waits without a timeout from here."""
        parsed = super().parse_request()
        self.connection.settimeout(None)
        return parsed

    def _json(self, status: int, body: Json) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if status == 401:
            self.send_header("WWW-Authenticate", "Bearer")
            self.send_header("Connection", "close")
            self.close_connection = True  # its body (if any) is never read: nothing more on this connection
        self.end_headers()
        self.wfile.write(data)

    def _authorization(self) -> list[str]:
        return self.headers.get_all("Authorization") or []

    def _unauthorized(self) -> None:
        self._json(401, {"message": "unauthorized"})

    def do_GET(self) -> None:
        if self.path == contract.PATH_SESSIONS:
            self._json(200, {"workerKey": self.server.verifier.worker_key})
            return
        prefix = contract.PATH_CALLS + "/"
        if self.path.startswith(prefix):
            self._reattach(self.path[len(prefix) :])
            return
        if self.path != contract.PATH_HEALTH:
            self._json(404, {"message": "not found"})
            return
        with self.server.lock:
            calls, draining = len(self.server.calls), self.server.draining
        body = {"status": "draining" if draining else "ok", "calls": calls, "concurrency": self.server.concurrency}
        self._json(503 if draining else 200, body)

    def _reattach(self, target: str) -> None:
        """`GET /v1/calls/{executionId}[?waitSeconds=S]`: a detached call's final event (200), still
        running after up to `S` seconds (202, default 5, at most 10), or unknown here (404).
        """
        execution_id, _, query = target.partition("?")
        grant = self.server.verifier.verify(self._authorization(), "reattach", execution_id)
        if grant is None:
            self._unauthorized()
            return
        asked = parse_qs(query, keep_blank_values=True).get("waitSeconds", ["5"])[-1]
        try:
            wait_s = min(max(float(asked), 0.0), _MAX_REATTACH_WAIT_S)
        except ValueError:
            self._json(400, {"message": "waitSeconds must be a number"})
            return
        state, final = self.server.reattach(execution_id, grant.caller, wait_s)
        if state == "final" and final is not None:
            self._json(200, final)
        elif state == "running":
            self._json(202, {"status": "running"})
        else:
            self._json(404, {"message": "no such call here"})

    def do_DELETE(self) -> None:
        prefix = contract.PATH_CALLS + "/"
        execution_id = self.path[len(prefix) :] if self.path.startswith(prefix) else ""
        grant = self.server.verifier.verify(self._authorization(), "cancel", execution_id) if execution_id else None
        if grant is None:
            self._unauthorized()
            return
        with self.server.lock:
            call = self.server.calls.get(execution_id)
        if call is None or call.caller != grant.caller:
            self._json(404, {"message": "no such call in flight"})
            return
        call.cancel(time.monotonic())
        self._json(202, {"status": "cancelling"})

    def _open_session(self) -> None:
        """`POST /v1/sessions` with an offer and no body: 204 once the session is open, else 401."""
        if self.headers.get("Content-Length", "0") != "0" or self.headers.get("Transfer-Encoding"):
            self._json(400, {"message": "an offer has no body"})
            self.close_connection = True  # the body is never read: nothing more on this connection
            return
        if not self.server.verifier.open_session(self._authorization()):
            self._unauthorized()
            return
        self.send_response(204)
        self.end_headers()

    def do_POST(self) -> None:
        if self.path == contract.PATH_SESSIONS:
            self._open_session()
            return
        if self.path != contract.PATH_CALLS:
            self._json(404, {"message": "not found"})
            return
        grant = self.server.verifier.verify(self._authorization(), "call", None)
        if grant is None:  # before the body is read: an outsider's bytes cost nothing
            self._unauthorized()
            return
        try:
            length = int(self.headers.get("Content-Length", ""))
            if not 0 < length <= _MAX_BODY_BYTES:
                raise ValueError("Content-Length must be between 1 and 64 MiB")
            raw = self.rfile.read(length)
            body = json.loads(raw)
            start, call = _parse_call(body)
        except (ValueError, TypeError, RecursionError) as exc:
            self._json(400, {"message": f"not a call: {exc}"})
            return
        if not self.server.verifier.bind(grant, call.execution_id, raw):  # minted for another body or call
            self._unauthorized()
            return
        call.caller = grant.caller
        expected = os.environ.get(contract.ENV_SERVE_TOOL)
        if expected and body.get("tool") not in (None, expected):  # a stale address now serving another tool
            self._json(409, {"message": f"this worker serves tool {expected!r}, not {body.get('tool')!r}"})
            return
        call.connection = self.connection
        if not self.server.admit(call):
            self._json(429, {"message": f"this worker already runs {self.server.concurrency} call(s)"})
            return
        final: Json | None = None
        try:
            final = self._stream(start, body, call)
        finally:
            self.server.leave(call, final)

    def _stream(self, start: Json, body: Json, call: _Call) -> Json:
        """Run the call, streaming its events; return its final event (also when the caller is gone)."""
        write_lock = threading.Lock()
        ended = False  # after the final event nothing more may be written: the connection is reused

        def send(event: Json) -> None:
            line = json.dumps(event).encode() + b"\n"
            with write_lock:
                if ended:
                    return  # a thread of the tool that outlived its call: dropped
                if call.detached:
                    return  # nobody reads: a re-attaching runner gets the final event only
                try:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                    self.wfile.flush()
                except OSError:  # the caller is gone
                    call.lose_caller(time.monotonic())

        ctx = ToolContext(
            body.get("workerUrl"), body.get("workerToken"), start=start, events=send, cancelled=call.cancelled
        )
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        final = self._run(ctx, call)
        try:
            line = json.dumps(final).encode() + b"\n"
        except (TypeError, ValueError) as exc:  # a result JSON cannot carry
            final = {"event": "crashed", "message": f"the tool's result is not JSON: {exc}"}
            line = json.dumps(final).encode() + b"\n"
        with write_lock:
            ended = True
            if call.detached or (call.detach_s > 0 and call.caller_gone()):
                self.close_connection = True
                return final  # kept for the runner that re-attaches
            try:  # the final event and the end of the stream in one write
                self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(line), line))
                self.wfile.flush()
            except OSError:
                self.close_connection = True
        return final

    def _run(self, ctx: ToolContext, call: _Call) -> Json:
        """Run the tool for one call and return its final event; nothing it raises escapes."""
        try:
            outcome = call_main(self.server.main, ctx)
            return {"event": "result" if "result" in outcome else "error", **outcome}
        except CallCancelled:
            return {"event": "cancelled"}
        except InputRoundsUnavailable:
            return {"event": "inputRequired"}
        except BaseException as exc:  # a tool's sys.exit or crash ends its call, not the worker
            if call.cancelled.is_set():
                return {"event": "cancelled"}  # what it raised was the cancel reaching it
            text = traceback.format_exc()
            if isinstance(exc, SystemExit):
                text = f"the tool called sys.exit({exc.code!r}) inside a warm worker\n{text}"
            sys.stderr.write(text)
            sys.stderr.flush()
            return {"event": "crashed", "message": text[-_CRASH_TAIL_CHARS:]}


_OPTIONAL_FIELDS: Final[dict[str, type]] = {
    "inputResponses": dict,
    "inputBeforeTask": dict,
    "taskId": str,
    "attempt": int,
    "workerUrl": str,
    "workerToken": str,
}
_KIND_NAMES: Final[dict[type, str]] = {dict: "an object", str: "a string", int: "an integer"}


def _parse_call(body: object) -> tuple[Json, _Call]:
    """The `ToolContext` start body and the call record of a `POST /v1/calls` body.

    Raises:
        ValueError: a field is missing or of the wrong type.
    """
    if not isinstance(body, dict):
        raise ValueError("the body must be a JSON object")
    execution_id = body.get("executionId")
    if not isinstance(execution_id, str) or not execution_id:
        raise ValueError("executionId must be a non-empty string")
    arguments = body.get("arguments", {})
    if not isinstance(arguments, dict):
        raise ValueError("arguments must be an object")
    limit = body.get("maxRunTimeSeconds", 600)
    grace = body.get("cancelGraceSeconds", 5)
    detach = body.get("detachSeconds", 0)
    if not all(
        isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
        for value in (limit, grace, detach)
    ):
        raise ValueError("maxRunTimeSeconds, cancelGraceSeconds and detachSeconds must be finite numbers ≥ 0")
    for key, kind in _OPTIONAL_FIELDS.items():
        if body.get(key) is not None and not isinstance(body[key], kind):
            raise ValueError(f"{key} must be {_KIND_NAMES[kind]}")
    start = {key: body.get(key) for key in ("arguments", "inputResponses", "taskId", "attempt", "inputBeforeTask")}
    call = _Call(
        execution_id,
        deadline=time.monotonic() + float(limit),
        grace_s=max(float(grace), 0.0),
        detach_s=float(detach),
    )
    return start, call


def serve(main: Main) -> NoReturn:
    """Serve `main` as a warm worker on `MCPTASKS_SERVE_HOST:MCPTASKS_SERVE_PORT` until SIGTERM.

    `MCPTASKS_SERVE_CONCURRENCY` calls run at once (default 1). On SIGTERM the worker stops taking
    calls (`/healthz` answers 503), lets the calls in flight finish, then exits 0. Exits 2 at once
    without `MCPTASKS_SERVE_CALL_KEY` (or `_FILE`), or `MCPTASKS_SERVE_TOOL`: it would take no call.
    """
    host = os.environ.get(contract.ENV_SERVE_HOST) or "0.0.0.0"
    port = int(os.environ[contract.ENV_SERVE_PORT])
    concurrency = max(int(os.environ.get(contract.ENV_SERVE_CONCURRENCY) or 1), 1)
    parent = os.environ.get(contract.ENV_SERVE_PARENT_PID)
    try:
        tool = os.environ.get(contract.ENV_SERVE_TOOL) or ""
        if not tool:
            raise ValueError(f"{contract.ENV_SERVE_TOOL} is not set: the tool a warm worker serves names its callers")
        verifier = CallVerifier.from_environment(os.environ, tool)
    except ValueError as exc:
        sys.stderr.write(f"mcp-tasks warm worker: {exc}\n")
        sys.exit(2)
    cert_file, key_file = (
        os.environ.get(contract.ENV_SERVE_TLS_CERT_FILE),
        os.environ.get(contract.ENV_SERVE_TLS_KEY_FILE),
    )
    tls = None
    if cert_file and key_file:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.minimum_version = ssl.TLSVersion.TLSv1_2
        tls.load_cert_chain(cert_file, key_file)
    server = WarmServer((host, port), main, concurrency, verifier, tls)

    def drain(_signum: int, _frame: object) -> None:
        with server.lock:
            server.draining = True
        threading.Thread(target=_exit_when_idle, args=(server,), daemon=True).start()

    signal.signal(signal.SIGTERM, drain)
    threading.Thread(target=server.watch, args=(int(parent) if parent else None,), daemon=True).start()
    scheme = "https" if tls is not None else "http"
    where = f"{scheme}://{host}:{server.server_address[1]}"
    sys.stderr.write(f"mcp-tasks warm worker: serving on {where} ({concurrency} at once)\n")
    sys.stderr.flush()
    server.serve_forever(poll_interval=0.2)
    sys.exit(0)


def _alive(pid: int) -> bool:
    """Whether process `pid` still exists (a wrapper such as `sh run.sh` may stand between it and us)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _exit_when_idle(server: WarmServer) -> None:
    with server.lock:
        while server.calls:
            server.idle.wait()
    server.shutdown()
