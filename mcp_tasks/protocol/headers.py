"""Request envelope and routing-header rules of MCP 2026-07-28 (SEP-2575 `_meta`, SEP-2243 headers).

`validate_envelope` runs the checks in the order the spec and the conformance suite require
(`protocol.md` §10): `_meta` (-32602) → `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name` against the
body (-32020) → supported version (-32022). Method existence and the capability gate come after,
in the gateway. `Mcp-Param-*` headers (`x-mcp-header`) live in `param_headers`.
Pure functions over a case-insensitive header mapping.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from mcp_tasks.protocol import constants
from mcp_tasks.protocol.errors import HeaderMismatch, InvalidParams, JsonObject, UnsupportedProtocolVersion
from mcp_tasks.protocol.jsonrpc import Message

_B64_PREFIX: Final = "=?base64?"
_B64_SUFFIX: Final = "?="
_B64_STRICT: Final = re.compile(r"^[A-Za-z0-9+/]*={0,2}$")
_VISIBLE_ASCII: Final = re.compile(r"^[\x20-\x7e]*$")


@dataclass(frozen=True, slots=True)
class RequestEnvelope:
    """What a 2026-07-28 request says about itself in `params._meta`.

    `client_capabilities` is the request's own `ClientCapabilities` object (`{}` = none); it is
    never inferred from earlier requests (MCP 2026-07-28 `basic/index.mdx` §Statelessness).
    """

    protocol_version: str
    client_capabilities: JsonObject
    meta: JsonObject

    def declares_extension(self, extension: str) -> bool:
        """True when `clientCapabilities.extensions[extension]` is present on this request."""
        extensions = self.client_capabilities.get("extensions")
        return isinstance(extensions, dict) and isinstance(extensions.get(extension), dict)

    @property
    def declares_tasks(self) -> bool:
        """True when this request declared `io.modelcontextprotocol/tasks` (SEP-2663 Negotiation)."""
        return self.declares_extension(constants.TASKS_EXTENSION)

    def lacks_capabilities(self, required: JsonObject) -> JsonObject:
        """Return the subset of `required` (a `ClientCapabilities` object) this request did not declare."""
        missing: JsonObject = {}
        for key, value in required.items():
            declared = self.client_capabilities.get(key)
            if key == "extensions" and isinstance(value, dict):
                absent = {ext: v for ext, v in value.items() if not self.declares_extension(ext)}
                if absent:
                    missing[key] = absent
            elif not isinstance(declared, dict):
                missing[key] = value
        return missing


def decode_header_value(raw: str) -> str:
    """Decode one `Mcp-Name`/`Mcp-Param-*` value: trim, then unwrap `=?base64?...?=` strictly.

    A value without both the prefix and the suffix is literal. Raises:
        HeaderMismatch: invalid base64 inside the sentinel, or non-visible-ASCII characters (-32020).
    """
    value = raw.strip()
    if value.startswith(_B64_PREFIX) and value.endswith(_B64_SUFFIX) and len(value) >= len(_B64_PREFIX + _B64_SUFFIX):
        encoded = value[len(_B64_PREFIX) : -len(_B64_SUFFIX)]
        if len(encoded) % 4 != 0 or not _B64_STRICT.match(encoded):
            raise HeaderMismatch("Header value has invalid base64 inside the =?base64?...?= sentinel")
        try:
            return base64.b64decode(encoded, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError) as exc:
            raise HeaderMismatch("Header value has invalid base64 inside the =?base64?...?= sentinel") from exc
    if not _VISIBLE_ASCII.match(value):
        raise HeaderMismatch("Header value has characters outside visible ASCII; send it as =?base64?...?=")
    return value


_ROUTING_HEADERS: Final = (constants.HEADER_PROTOCOL_VERSION, constants.HEADER_METHOD, constants.HEADER_NAME)


def conflicting_header(headers: Mapping[str, str], names: Iterable[str] = _ROUTING_HEADERS) -> str | None:
    """The first of `names` (default: `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`) sent more than once
    with different values, or `None`. Needs a multi-valued mapping (`getall`, as aiohttp's headers).
    """
    getall = getattr(headers, "getall", None)
    if getall is None:
        return None
    for name in names:
        values = getall(name, ())
        if len(values) > 1 and len({value.strip() for value in values}) > 1:
            return name
    return None


def refuse_repeated(headers: Mapping[str, str], names: Iterable[str] = _ROUTING_HEADERS) -> None:
    """Refuse a request that sends one of `names` more than once with different values.

    A proxy or a later check could read another of the values than the one we judged (the first,
    with aiohttp), so such a request is refused whole. `MCP-Protocol-Version`, `Mcp-Method` and
    `Mcp-Name` by default; the gateway also passes `Authorization`, before it authenticates.

    Raises:
        HeaderMismatch: the first such header, named (-32020, HTTP 400; SEP-2243 header validation).
    """
    repeated = conflicting_header(headers, names)
    if repeated is not None:
        raise HeaderMismatch(
            f"{repeated} header is sent more than once with different values; send it once (a proxy could read "
            "another value than the server)"
        )


def validate_envelope(
    headers: Mapping[str, str], message: Message, *, accept_missing_task_name: bool = False
) -> RequestEnvelope:
    """Validate `_meta`, the routing headers and the protocol version of one request, in spec order.

    `accept_missing_task_name` lets a `tasks/*` request omit `Mcp-Name` (never send a different one);
    off by default, as SEP-2243 asks clients to send it and the conformance suite checks the refusal.

    Raises:
        InvalidParams: `params._meta` or one of its required keys is missing or mistyped (-32602, HTTP 400).
        HeaderMismatch: `MCP-Protocol-Version`, `Mcp-Method` or `Mcp-Name` is missing, differs from the body,
            or is sent twice with different values (-32020).
        UnsupportedProtocolVersion: the requested version is not served (-32022, `data = {supported, requested}`).
    """
    meta = message.params.get("_meta")
    if not isinstance(meta, dict):
        raise InvalidParams(
            "Invalid params: params._meta must be an object on every 2026-07-28 request "
            f"(with {constants.META_PROTOCOL_VERSION!r} and {constants.META_CLIENT_CAPABILITIES!r}); "
            f"a legacy client ({', '.join(constants.LEGACY_PROTOCOL_VERSIONS)}) starts with initialize instead",
            {"supported": list(constants.SUPPORTED_PROTOCOL_VERSIONS)},
        )
    version = meta.get(constants.META_PROTOCOL_VERSION)
    if not isinstance(version, str) or not version:
        raise InvalidParams(f"Invalid params: _meta[{constants.META_PROTOCOL_VERSION!r}] is required (a string)")
    capabilities = meta.get(constants.META_CLIENT_CAPABILITIES)
    if not isinstance(capabilities, dict):
        raise InvalidParams(f"Invalid params: _meta[{constants.META_CLIENT_CAPABILITIES!r}] is required (an object)")

    refuse_repeated(headers)
    header_version = headers.get(constants.HEADER_PROTOCOL_VERSION)
    if header_version is None or header_version.strip() != version:
        raise HeaderMismatch(
            f"{constants.HEADER_PROTOCOL_VERSION} header must be present and equal "
            f"_meta[{constants.META_PROTOCOL_VERSION!r}] ({version!r})"
        )
    header_method = headers.get(constants.HEADER_METHOD)
    if header_method is None or header_method.strip() != message.method:
        raise HeaderMismatch(f"{constants.HEADER_METHOD} header must be present and equal the body's method")
    name_key = constants.NAME_BEARING_PARAMS.get(message.method)
    if name_key is not None:
        body_value = message.params.get(name_key)
        header_name = headers.get(constants.HEADER_NAME)
        tolerated = header_name is None and accept_missing_task_name and message.method in constants.TASK_METHODS
        if (
            isinstance(body_value, str)
            and not tolerated
            and (header_name is None or decode_header_value(header_name) != body_value)
        ):
            sendable = body_value.isascii() and body_value.isprintable() and len(body_value) <= 128
            hint = f": send `{constants.HEADER_NAME}: {body_value}`" if sendable else " (base64-wrapped if not ASCII)"
            missing = "is missing" if header_name is None else "differs from the body"
            raise HeaderMismatch(
                f"{constants.HEADER_NAME} header {missing}; it must equal params.{name_key} for {message.method}"
                f"{hint} (SEP-2243)"
            )
    if version not in constants.MODERN_PROTOCOL_VERSIONS:  # a legacy revision is chosen by initialize, not _meta
        raise UnsupportedProtocolVersion(version)
    return RequestEnvelope(protocol_version=version, client_capabilities=capabilities, meta=meta)
