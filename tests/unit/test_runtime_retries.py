"""The tool runtime's worker-API retries, against a real HTTP server that loses one answer."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from mcp_tasks.runtime import ToolContext, content, contract


class LosesFirstRoundAnswer(ThreadingHTTPServer):
    """A worker API that records each input-requests body and never answers the first one: it drops the
    connection (an executor killed between its durable write and its answer) or, with `stall_s`, holds it
    that long first (an executor on a lost node: no reset, the client's timeout ends it)."""

    def __init__(self, stall_s: float = 0.0) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.rounds: list[dict[str, Any]] = []
        self.stall_s = stall_s


class _Handler(BaseHTTPRequestHandler):
    server: LosesFirstRoundAnswer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _answer(self, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == contract.PATH_INPUT:
            self._answer({"arguments": {}, "taskId": "t1"})
        else:  # input-responses: every key asked is answered
            keys = self.path.split("keys=", 1)[1].split("&", 1)[0].split(",")
            self._answer({"inputResponses": {key: {"action": "accept", "content": {"ok": True}} for key in keys}})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.rounds.append(body)
        if len(self.server.rounds) == 1:
            time.sleep(self.server.stall_s)
            self.close_connection = True  # the request was taken; its answer never comes
            return
        self._answer({"keys": {key: key for key in body["inputRequests"]}})


@pytest.fixture(params=[0.0, 2.0], ids=["dropped", "stalled"])
def server(request: pytest.FixtureRequest) -> Iterator[LosesFirstRoundAnswer]:
    server = LosesFirstRoundAnswer(stall_s=request.param)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_a_round_whose_answer_was_lost_is_sent_again_with_its_round_id(server: LosesFirstRoundAnswer) -> None:
    """`ask` retries a POST whose answer was lost (connection dropped, or no answer within the timeout)
    with the same body, `roundId` included, so the executor hands back the keys it minted the first time
    (`transitions.add_input_requests`); a new round has a new id."""
    ctx = ToolContext(url=f"http://127.0.0.1:{server.server_address[1]}", token="t", timeout_s=1.0, retry_s=10)
    question = content.form_request("Go on?", {"ok": {"type": "boolean"}})
    assert ctx.ask({"go": question}) == {"go": {"action": "accept", "content": {"ok": True}}}
    first, *retries = server.rounds  # one retry; more only if a retry too outlived the timeout
    assert retries and all(retry == first for retry in retries), "every retry is the same request"
    assert contract.ROUND_ID_PATTERN.fullmatch(first["roundId"])
    sent = len(server.rounds)
    ctx.ask({"go": question})
    assert server.rounds[sent]["roundId"] != first["roundId"], "each round has its own id"
