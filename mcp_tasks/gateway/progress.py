"""`notifications/progress` for a synchronous `tools/call` on its own POST's SSE stream.

A request whose `_meta.progressToken` is set may hear of its run's progress (MCP 2026-07-28
`utilities/progress`): the response becomes `text/event-stream` at the first report, carries each
report as a `notifications/progress {progressToken, progress, total?, message?}` event, and ends with the
JSON-RPC response. A call that reports nothing is answered with plain JSON, as without a token. Only
this request's stream carries them, never a `subscriptions/listen` stream (the tasks extension).
"""

from __future__ import annotations

import logging
from typing import Final

from aiohttp import web

from mcp_tasks.gateway.responses import RESPONSE_CODE_KEY, SSE_HEADERS, json_response, sse_frame
from mcp_tasks.protocol import constants
from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.protocol.jsonrpc import notification

logger = logging.getLogger("mcp_tasks.gateway")

NOTIFICATION_PROGRESS: Final = "notifications/progress"


def progress_token(params: JsonObject) -> str | int | None:
    """The request's `_meta.progressToken` when it is a valid `ProgressToken` (string or integer)."""
    meta = params.get("_meta")
    token = meta.get(constants.META_PROGRESS_TOKEN) if isinstance(meta, dict) else None
    if isinstance(token, str) or (isinstance(token, int) and not isinstance(token, bool)):
        return token
    return None


class ProgressStream:
    """The SSE response of one request, opened lazily by its first progress report.

    Args:
        request: the POST being answered.
        token: its `progressToken`.
    """

    def __init__(self, request: web.Request, token: str | int) -> None:
        self.request = request
        self.token = token
        self._response: web.StreamResponse | None = None
        self._closed = False
        self._last: float | None = None

    @property
    def started(self) -> bool:
        """True once the SSE response is open (its HTTP status, 200, is sent)."""
        return self._response is not None

    async def report(self, report: JsonObject) -> None:
        """Send one `{progress, total?, message?}` report; a gone client or a value that goes back is dropped."""
        progress = report.get("progress")
        if self._closed or not isinstance(progress, int | float):
            return
        if self._last is not None and progress < self._last:
            return  # the spec requires progress to grow with each notification
        self._last = progress
        params: JsonObject = {
            "progressToken": self.token,
            **{k: report[k] for k in ("progress", "total", "message") if k in report},
        }
        try:
            if self._response is None:
                self._response = web.StreamResponse(headers=SSE_HEADERS)
                self._response[RESPONSE_CODE_KEY] = "ok"
                await self._response.prepare(self.request)
            await self._response.write(sse_frame(notification(NOTIFICATION_PROGRESS, params)))
        except (ConnectionError, RuntimeError) as exc:  # the client left; the call notices it on its own
            logger.debug("progress not delivered: %s", exc)
            self._closed = True

    async def respond(self, body: JsonObject, status: int = 200) -> web.StreamResponse:
        """End the request with its JSON-RPC response: on the stream when one is open, else as JSON."""
        if self._response is None:
            return json_response(body, status)
        error = body.get("error")
        self._response[RESPONSE_CODE_KEY] = str(error.get("code")) if isinstance(error, dict) else "ok"
        if not self._closed:
            try:
                await self._response.write(sse_frame(body))
                await self._response.write_eof()
            except (ConnectionError, RuntimeError) as exc:
                logger.debug("response not delivered: %s", exc)
        return self._response
