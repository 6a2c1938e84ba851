"""`x-mcp-header`: tool arguments mirrored into `Mcp-Param-<Name>` HTTP headers (SEP-2243, protocol.md §6.3).

A property of a tool's `inputSchema` may carry `"x-mcp-header": "<Name>"`; a client then sends the
argument's value in `Mcp-Param-<Name>` as well, so proxies can route on it. The annotation is allowed
only on a primitive property (`string`, `integer` or `boolean`, never `number`) reached from the root
through `properties` alone (not through `items`, `$ref`, `$defs` or a composition keyword), and the
names are unique case-insensitively. `bindings` checks a manifest's schema at load time; `check`
validates one request's headers against its arguments. Pure functions.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from mcp_tasks.protocol import constants
from mcp_tasks.protocol.errors import HeaderMismatch, JsonObject
from mcp_tasks.protocol.headers import conflicting_header, decode_header_value

ANNOTATION: Final = "x-mcp-header"
_ALLOWED_TYPES: Final = frozenset({"string", "integer", "boolean"})
_HEADER_NAME: Final = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$")
"""An HTTP field-name token (RFC 9110 §5.6.2), bounded."""


class InvalidHeaderAnnotation(ValueError):
    """An `x-mcp-header` annotation breaks SEP-2243's rules; the message names the property and the rule."""


@dataclass(frozen=True, slots=True)
class HeaderBinding:
    """One argument mirrored into a header: `path` of property names from the root, header `name`."""

    path: tuple[str, ...]
    name: str

    @property
    def header(self) -> str:
        """The full HTTP header name, `Mcp-Param-<name>`."""
        return constants.HEADER_PARAM_PREFIX + self.name

    @property
    def property_path(self) -> str:
        """The property as a readable path, e.g. `target.region`."""
        return ".".join(self.path)


def bindings(input_schema: JsonObject) -> tuple[HeaderBinding, ...]:
    """The `x-mcp-header` bindings of a tool's `inputSchema`, checked against SEP-2243.

    Raises:
        InvalidHeaderAnnotation: an annotation on a `number`, object or array property, one not reachable
            through `properties` alone, a value that is not a valid header name, or two names equal
            case-insensitively.
    """
    found: list[HeaderBinding] = []
    reachable: set[int] = set()
    for path, schema in _property_chains(input_schema, ()):
        reachable.add(id(schema))
        name = schema.get(ANNOTATION)
        if name is None:
            continue
        where = ".".join(path)
        if not isinstance(name, str) or not _HEADER_NAME.match(name):
            raise InvalidHeaderAnnotation(
                f"property {where!r}: x-mcp-header must be a header name (letters, digits, '-'), got {name!r}"
            )
        kind = schema.get("type")
        if kind not in _ALLOWED_TYPES:
            raise InvalidHeaderAnnotation(
                f"property {where!r}: x-mcp-header is allowed only on a string, integer or boolean property "
                f"(type {kind!r} is not; a number cannot be mirrored exactly)"
            )
        if any(other.name.lower() == name.lower() for other in found):
            raise InvalidHeaderAnnotation(
                f"property {where!r}: x-mcp-header {name!r} is used twice (names ignore case)"
            )
        found.append(HeaderBinding(path, name))
    for where, schema in _all_subschemas(input_schema, "inputSchema"):
        if ANNOTATION in schema and id(schema) not in reachable:
            raise InvalidHeaderAnnotation(
                f"{where}: x-mcp-header is allowed only on properties reached from the root through "
                "'properties' alone (not items, $ref, $defs or anyOf/oneOf/allOf/if)"
            )
    return tuple(found)


def _property_chains(schema: Mapping[str, Any], path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], JsonObject]]:
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return
    for name, child in properties.items():
        if isinstance(child, dict):
            yield (*path, name), child
            yield from _property_chains(child, (*path, name))


_SCHEMA_MAPS: Final = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
_VALUES: Final = frozenset({"const", "enum", "default", "examples"})
"""Keywords whose values are data, not schemas."""


def _all_subschemas(schema: Any, where: str) -> Iterator[tuple[str, JsonObject]]:
    """Every object nested in `schema` (a superset of its subschemas), with a readable location."""
    if isinstance(schema, dict):
        yield where, schema
        for key, value in schema.items():
            if key in _SCHEMA_MAPS and isinstance(value, dict):  # name → subschema: the names are not keywords
                for name, child in value.items():
                    yield from _all_subschemas(child, f"{where}.{key}.{name}")
            elif key not in _VALUES:
                yield from _all_subschemas(value, f"{where}.{key}")
    elif isinstance(schema, list):
        for index, item in enumerate(schema):
            yield from _all_subschemas(item, f"{where}[{index}]")


def expected_value(value: object) -> str:
    """The header text a client sends for an argument value (`true`/`false` for booleans)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def check(headers: Mapping[str, str], bound: tuple[HeaderBinding, ...], arguments: Mapping[str, Any]) -> None:
    """Check each `Mcp-Param-<Name>` against the argument it mirrors (SEP-2243 server validation).

    An argument absent or `null` in the body expects no header, and gets none: a header the body does not
    back is a mismatch too (a proxy would route on a value the tool never sees). Raises:
        HeaderMismatch: a mirrored argument's header is missing, has bad base64 or characters, differs from
            the body value, or is sent without the argument (-32020, HTTP 400).
    """
    repeated = conflicting_header(headers, [binding.header for binding in bound]) if bound else None
    if repeated is not None:
        raise HeaderMismatch(f"{repeated} header is sent more than once with different values; send it once")
    for binding in bound:
        value: Any = arguments
        for name in binding.path:
            value = value.get(name) if isinstance(value, dict) else None
        raw = headers.get(binding.header)
        if value is None:
            if raw is not None:
                raise HeaderMismatch(
                    f"{binding.header} header is sent, but the body has no argument {binding.property_path!r}"
                )
            continue
        if raw is None:
            raise HeaderMismatch(
                f"{binding.header} header is required: the body has argument {binding.property_path!r}"
            )
        if decode_header_value(raw) != expected_value(value):
            raise HeaderMismatch(f"{binding.header} header must equal argument {binding.property_path!r}")
