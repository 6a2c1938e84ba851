"""`x-mcp-header` (SEP-2243): which annotations a manifest may carry, and how headers are checked."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_tasks.protocol import param_headers
from mcp_tasks.protocol.errors import HeaderMismatch
from mcp_tasks.tasks.errors import InvalidToolManifest
from mcp_tasks.tasks.tools import parse_manifest


def manifest(input_schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "mcptasks.io/v1alpha1",
        "kind": "McpTool",
        "metadata": {"name": "t"},
        "spec": {"name": "t", "description": "d", "inputSchema": input_schema, "container": {"command": ["true"]}},
    }


def obj(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


@pytest.mark.parametrize(
    ("schema", "refusal"),
    [
        (obj(n={"type": "number", "x-mcp-header": "N"}), "'n': x-mcp-header is allowed only on a string"),
        (obj(o=obj(a={"type": "string"}) | {"x-mcp-header": "O"}), "'o': x-mcp-header is allowed only on a string"),
        (obj(s={"type": "string", "x-mcp-header": "Bad Name"}), "must be a header name"),
        (
            obj(a={"type": "string", "x-mcp-header": "Region"}, b={"type": "string", "x-mcp-header": "region"}),
            "used twice",
        ),
        (
            {"type": "object", "anyOf": [obj(a={"type": "string", "x-mcp-header": "A"})]},
            "inputSchema.anyOf[0].properties.a: x-mcp-header is allowed only on properties reached",
        ),
        (
            {"type": "object", "$defs": {"d": {"type": "string", "x-mcp-header": "D"}}, "properties": {}},
            "inputSchema.$defs.d: x-mcp-header",
        ),
        (obj(items={"type": "array", "items": {"type": "string", "x-mcp-header": "I"}}), "properties.items.items:"),
    ],
)
def test_a_manifest_with_a_forbidden_annotation_is_refused_naming_the_tool_and_property(
    schema: dict[str, Any], refusal: str
) -> None:
    with pytest.raises(InvalidToolManifest, match="tool 't'") as raised:
        parse_manifest(manifest(schema), "t.yaml")
    assert refusal in str(raised.value)


def test_properties_named_like_keywords_are_only_names() -> None:
    spec = parse_manifest(manifest(obj(**{"x-mcp-header": {"type": "string"}, "items": {"type": "string"}})), "t.yaml")
    assert spec.header_bindings == ()


def test_nested_integer_and_boolean_arguments_are_mirrored() -> None:
    schema = obj(
        target=obj(zone={"type": "integer", "x-mcp-header": "Zone"}),
        dry={"type": "boolean", "x-mcp-header": "Dry-Run"},
    )
    bound = parse_manifest(manifest(schema), "t.yaml").header_bindings
    assert [(b.path, b.header) for b in bound] == [
        (("target", "zone"), "Mcp-Param-Zone"),
        (("dry",), "Mcp-Param-Dry-Run"),
    ]
    arguments = {"target": {"zone": 7}, "dry": True}
    param_headers.check({"Mcp-Param-Zone": "7", "Mcp-Param-Dry-Run": "true"}, bound, arguments)
    for headers in ({"Mcp-Param-Zone": "7"}, {"Mcp-Param-Zone": "8", "Mcp-Param-Dry-Run": "true"}):
        with pytest.raises(HeaderMismatch):
            param_headers.check(headers, bound, arguments)
    with pytest.raises(HeaderMismatch, match="invalid base64"):
        param_headers.check({"Mcp-Param-Zone": "=?base64?Nw?=", "Mcp-Param-Dry-Run": "true"}, bound, arguments)
    param_headers.check({}, bound, {"target": {}})  # absent arguments expect no header
