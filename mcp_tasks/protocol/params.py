"""The params of each method we serve, parsed before its handler runs (`gateway.dispatch`).

Every served method names one parser here: a `params` object in, a typed value out, or `InvalidParams`
(-32602) whose message names the field, never a library's text (CONVENTIONS.md §Errors). Only what a
handler reads first is parsed here, so the order of refusals is the one the handlers had (a tool's
`inputSchema`, `requestState` and `inputResponses` are judged later, by `tools/call` itself, in the
order protocol.md §4.3 gives). The tasks extension's params are its pydantic models (`models.py`); the
core methods' are plain dataclasses: a tool's arguments are never copied or revalidated on the way in.
Pure functions, no I/O.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, TypeVar

from pydantic import BaseModel, ValidationError

from mcp_tasks.protocol.errors import InvalidParams, JsonObject

M = TypeVar("M", bound=BaseModel)


def validated(model: type[M]) -> Callable[[JsonObject], M]:
    """A parser that validates `params` into `model` (the tasks extension's `TaskRequestParams`, ...).

    The parser raises `InvalidParams` (-32602) naming the first field that is missing or malformed.
    """

    def parse(params: JsonObject) -> M:
        try:
            return model.model_validate(params)
        except ValidationError as exc:
            field = ".".join(str(part) for part in exc.errors()[0]["loc"]) or "params"
            raise InvalidParams(f"Invalid params: {field} is missing or malformed") from exc

    return parse


@dataclass(frozen=True, slots=True)
class NoParams:
    """A method that reads nothing from its params (`ping`, `server/discover`); whatever is sent is ignored."""

    @staticmethod
    def parse(params: JsonObject) -> NoParams:
        """The one `NoParams` value."""
        return _NO_PARAMS


_NO_PARAMS: Final = NoParams()


def _unknown_cursor() -> InvalidParams:
    return InvalidParams("Invalid params: unknown cursor; start again without one")


def page_cursor(offset: int) -> str:
    """The opaque `nextCursor` of the page that starts at item `offset` (0-based)."""
    return base64.urlsafe_b64encode(f"o:{offset}".encode()).decode()


@dataclass(frozen=True, slots=True)
class PageParams:
    """Params of a list method (`tools/list`, `resources/list`, `resources/templates/list`): `{cursor?}`.

    `offset` is the 0-based index of the page's first item: 0 without a cursor, else the one `page_cursor`
    wrote into the `nextCursor` the client sends back (MCP 2026-07-28 `utilities/pagination`).
    """

    offset: int

    @staticmethod
    def parse(params: JsonObject) -> PageParams:
        """Raises `InvalidParams` (-32602) for a cursor that is not a string or not one we issued."""
        cursor = params.get("cursor")
        if cursor is None:
            return _FIRST_PAGE
        if not isinstance(cursor, str):
            raise InvalidParams("Invalid params: cursor must be a string from a previous nextCursor")
        try:
            offset = int(base64.urlsafe_b64decode(cursor.encode()).decode().removeprefix("o:"))
        except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
            raise _unknown_cursor() from exc
        if offset < 0:
            raise _unknown_cursor()
        return PageParams(offset)


_FIRST_PAGE: Final = PageParams(0)


@dataclass(frozen=True, slots=True)
class CallToolParams:
    """Params of `tools/call` (either era): the tool's `name` and its `arguments` object (`{}` when absent).

    The rest (`inputResponses`, `requestState`, `_meta`) is read by `tools/call` in its own order.
    """

    name: str
    arguments: JsonObject

    @staticmethod
    def parse(params: JsonObject) -> CallToolParams:
        """Raises `InvalidParams` (-32602): `name` missing or not a non-empty string, `arguments` not an object."""
        name = params.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidParams("Invalid params: params.name (the tool name) is required")
        arguments = params.get("arguments")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise InvalidParams("Invalid params: params.arguments must be an object")
        return CallToolParams(name, arguments)


@dataclass(frozen=True, slots=True)
class ReadResourceParams:
    """Params of `resources/read`: the resource's `uri` (MCP 2026-07-28 `server/resources`)."""

    uri: str

    @staticmethod
    def parse(params: JsonObject) -> ReadResourceParams:
        """Raises `InvalidParams` (-32602) when `uri` is missing, empty or not a string."""
        uri = params.get("uri")
        if not isinstance(uri, str) or not uri:
            raise InvalidParams("Invalid params: params.uri is required")
        return ReadResourceParams(uri)


@dataclass(frozen=True, slots=True)
class ListenParams:
    """Params of `subscriptions/listen`: the subscription filter `notifications` (SEP-2575 §subscriptions).

    `notifications` is kept as sent; its `taskIds` are judged by `listen` after the capability check.
    """

    notifications: JsonObject

    @staticmethod
    def parse(params: JsonObject) -> ListenParams:
        """Raises `InvalidParams` (-32602) when `notifications` is missing or not an object."""
        filters = params.get("notifications")
        if not isinstance(filters, dict):
            raise InvalidParams("Invalid params: params.notifications (the subscription filter) is required")
        return ListenParams(filters)


@dataclass(frozen=True, slots=True)
class InitializeParams:
    """Params of a legacy-era `initialize` (2025-11-25 `lifecycle`): the `protocolVersion` the client asks for.

    `protocol_version` is `None` when absent or not a string (the newest legacy revision is then answered).
    """

    protocol_version: str | None

    @staticmethod
    def parse(params: JsonObject) -> InitializeParams:
        """Never raises: an `initialize` is answered whatever it asks for."""
        requested = params.get("protocolVersion")
        return InitializeParams(requested if isinstance(requested, str) else None)


@dataclass(frozen=True, slots=True)
class CancelledParams:
    """Params of a legacy-era `notifications/cancelled` (2025-11-25 `utilities/cancellation`): `requestId`.

    `request_id` is kept as sent (any JSON value): a notification is never refused, an id that cannot
    name a call is ignored by the receiver.
    """

    request_id: object

    @staticmethod
    def parse(params: JsonObject) -> CancelledParams:
        """Never raises."""
        return CancelledParams(params.get("requestId"))
