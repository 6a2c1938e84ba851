"""The McpServer manifest (`tasks/servers.py`): parsing, and listed tools as bridge-run ToolSpecs."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from mcp_tasks.tasks.errors import InvalidToolManifest
from mcp_tasks.tasks.servers import (
    DEFAULT_FOLLOW_TOOLS,
    ENV_BRIDGE_SERVER,
    ENV_BRIDGE_TOOL,
    MAX_SERVER_TOOLS,
    Discovery,
    ServerToolSpec,
    Transport,
    is_server_document,
    parse_server_manifest,
    tool_specs,
)
from mcp_tasks.tasks.tools import TaskPolicy, ToolSpec

BRIDGE = ["python", "-m", "mcp_tasks.bridge"]


def _document(**spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"container": {"command": ["npx", "mcp-server-everything", "stdio"]}}
    body.update(spec)
    return {"apiVersion": "mcptasks.io/v1alpha1", "kind": "McpServer", "metadata": {"name": "everything"}, "spec": body}


DRAFT7_ADD: dict[str, Any] = {
    "name": "add",
    "title": "Add",
    "description": "Adds two numbers",
    "inputSchema": {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    },
    "annotations": {"readOnlyHint": True},
    "icons": [{"src": "https://example.com/add.png", "mimeType": "image/png"}],
}
PLAIN_ECHO: dict[str, Any] = {"name": "echo", "inputSchema": {"type": "object"}}


def _discovery(*tools: dict[str, Any]) -> Discovery:
    return Discovery(protocol_version="2025-06-18", server_info={"name": "t", "version": "1"}, tools=tools)


def test_a_minimal_stdio_server_parses_with_defaults() -> None:
    """Our own choice: stdio is the default transport, no prefix, McpTool's execution defaults."""
    server = parse_server_manifest(_document(), source="s.yaml", base_dir="/srv")
    assert server.name == "everything"
    assert server.manifest.transport is Transport.STDIO
    assert server.manifest.tool_name_prefix == ""
    assert server.manifest.warm is None
    assert is_server_document(_document()) and not is_server_document({"kind": "McpTool"})


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"transport": "streamable-http"}, "spec"),
        ({"transport": "stdio", "http": {"port": 3001}}, "spec"),
        ({"transport": "sse"}, "spec.transport"),
        ({"container": None}, "spec"),
        ({"toolNamePrefix": "has space"}, "spec.toolNamePrefix"),
        ({"tools": {"echo": {"expose": False, "color": "red"}}}, "spec.tools.echo.color"),
        ({"toolDefaults": {"execution": {"maxRunTimeSeconds": 0}}}, "spec.toolDefaults.execution.maxRunTimeSeconds"),
    ],
)
def test_an_invalid_server_manifest_is_refused_naming_the_field(spec: dict[str, Any], field: str) -> None:
    """Our own choice: a broken manifest stops start-up with a message naming the field, as McpTool's does."""
    with pytest.raises(InvalidToolManifest, match=f"s.yaml: invalid McpServer at {field}"):
        parse_server_manifest(_document(**spec), source="s.yaml")


def test_a_streamable_http_server_may_be_a_running_url_without_container() -> None:
    """Our own choice: embedded, `http.url` reaches a server someone else runs."""
    server = parse_server_manifest(
        _document(transport="streamable-http", http={"url": "http://127.0.0.1:9/mcp"}, container=None), source="s"
    )
    assert server.manifest.http is not None and server.manifest.http.url == "http://127.0.0.1:9/mcp"


def test_listed_tools_become_bridge_run_specs_with_the_listing_verbatim() -> None:
    """MCP 2025-11-25 Tool: schemas, title, annotations and icons are kept as the server listed them."""
    server = parse_server_manifest(
        _document(toolNamePrefix="ev_", container={"command": ["srv"], "env": [{"name": "K", "value": "v"}]}),
        source="s.yaml",
        base_dir="/srv",
    )
    specs, refusals = tool_specs(server, _discovery(DRAFT7_ADD, PLAIN_ECHO), BRIDGE)
    assert refusals == []
    add, echo = specs
    assert isinstance(add, ServerToolSpec)
    assert (add.name, add.server_tool_name, echo.name) == ("ev_add", "add", "ev_echo")
    wire = add.tool.model_dump(by_alias=True, exclude_none=True)
    assert wire["inputSchema"] == DRAFT7_ADD["inputSchema"]
    assert wire["title"] == "Add" and wire["annotations"] == {"readOnlyHint": True}
    assert wire["icons"] == DRAFT7_ADD["icons"]
    assert "description" not in echo.tool.model_dump(by_alias=True, exclude_none=True)
    assert add.manifest.container.command == BRIDGE
    env = {item.name: item.value for item in add.manifest.container.env}
    assert env[ENV_BRIDGE_TOOL] == "add"
    target = json.loads(env[ENV_BRIDGE_SERVER] or "")
    assert target["command"] == ["srv"] and target["env"] == {"K": "v"} and target["workingDir"] == "/srv"
    assert "K" not in env, "the server's environment is the server's, passed by the bridge, not the bridge's own"


def test_arguments_are_validated_in_the_dialect_the_schema_declares() -> None:
    """MCP 2025-11-25: a schema without `$schema` is 2020-12; one naming draft-07 is validated as draft-07."""
    server = parse_server_manifest(_document(), source="s")
    (add,), _ = tool_specs(server, _discovery(DRAFT7_ADD), BRIDGE)
    assert type(add.validator).__name__ == "Draft7Validator"
    assert add.argument_errors({"a": 1, "b": 2}) == []
    assert add.argument_errors({"a": 1, "b": "x"}) != []
    assert add.argument_errors({"a": 1, "b": 2, "c": 3}) != []


def test_idempotent_follows_the_annotations_unless_set() -> None:
    """Our own choice: `idempotentHint` or `readOnlyHint` true makes a lost run safe to start again; the
    manifest's `toolDefaults` and then `spec.tools` win over the hint, field by field."""
    hinted = {**PLAIN_ECHO, "name": "hinted", "annotations": {"idempotentHint": True}}
    server = parse_server_manifest(
        _document(
            toolDefaults={"execution": {"maxRunTimeSeconds": 30}},
            tools={"add": {"execution": {"idempotent": False, "taskPolicy": "required"}}},
        ),
        source="s",
    )
    specs, _ = tool_specs(server, _discovery(DRAFT7_ADD, PLAIN_ECHO, hinted), BRIDGE)
    by_name = {spec.name: spec.execution for spec in specs}
    assert (by_name["add"].idempotent, by_name["echo"].idempotent, by_name["hinted"].idempotent) == (False, False, True)
    assert by_name["add"].task_policy is TaskPolicy.REQUIRED and by_name["echo"].task_policy is TaskPolicy.OPTIONAL
    assert {e.max_run_time_seconds for e in by_name.values()} == {30}
    unset = parse_server_manifest(_document(), source="s")
    (add,), _ = tool_specs(unset, _discovery(DRAFT7_ADD), BRIDGE)
    assert add.execution.idempotent is True


def test_expose_false_hides_a_tool_and_overrides_carry_scopes_and_capabilities() -> None:
    """Our own choice: `expose: false` leaves the tool out; `requiredScopes` and `requiredClientCapabilities`
    apply as on an McpTool."""
    server = parse_server_manifest(
        _document(
            tools={
                "echo": {"expose": False},
                "add": {"requiredScopes": ["math"], "requiredClientCapabilities": {"sampling": {}}},
            }
        ),
        source="s",
    )
    specs, refusals = tool_specs(server, _discovery(DRAFT7_ADD, PLAIN_ECHO), BRIDGE)
    assert [spec.name for spec in specs] == ["add"] and refusals == []
    assert specs[0].required_scopes == frozenset({"math"})
    assert specs[0].manifest.required_client_capabilities == {"sampling": {}}


def test_unusable_listed_tools_are_left_out_with_a_reason() -> None:
    """Our own choice: one bad tool does not refuse the whole server; the reason names the tool."""
    bad_name = {**PLAIN_ECHO, "name": "has space"}
    bad_schema = {**PLAIN_ECHO, "name": "bad", "inputSchema": {"type": "object", "properties": {"a": {"type": 3}}}}
    server = parse_server_manifest(_document(tools={"ghost": {"expose": False}}), source="s")
    specs, refusals = tool_specs(server, _discovery(PLAIN_ECHO, bad_name, bad_schema), BRIDGE)
    assert [spec.name for spec in specs] == ["echo"]
    assert len(refusals) == 3
    assert "'has space'" in refusals[0] and "'bad'" in refusals[1] and "spec.tools.ghost" in refusals[2]


@pytest.fixture
def listener() -> Iterator[tuple[str, socket.socket]]:
    """A loopback listener nobody accepts on: a connection attempt stays in its backlog for the test to see."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        sock.setblocking(False)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/schema.json", sock


def _connections(sock: socket.socket) -> int:
    count = 0
    while True:
        try:
            conn, _ = sock.accept()
        except BlockingIOError:
            return count
        conn.close()
        count += 1


def test_a_remote_ref_is_refused_at_discovery_and_never_fetched(listener: tuple[str, socket.socket]) -> None:
    """Our own choice (SSRF): a schema's `$ref` must resolve inside it; a URL is refused, naming it, never fetched."""
    url, sock = listener
    remote_in = {
        **PLAIN_ECHO,
        "name": "fetch_in",
        "inputSchema": {"type": "object", "properties": {"a": {"$ref": url}}},
    }
    remote_out = {**PLAIN_ECHO, "name": "fetch_out", "outputSchema": {"$ref": url}}
    missing = {**PLAIN_ECHO, "name": "missing", "inputSchema": {"type": "object", "$ref": "#/$defs/nowhere"}}
    local = {
        **PLAIN_ECHO,
        "name": "local",
        "inputSchema": {
            "type": "object",
            "$defs": {"n": {"type": "number"}},
            "properties": {
                "a": {"$ref": "#/$defs/n"},
                "b": {"const": {"$ref": url}},
                "c": {"$ref": "https://json-schema.org/draft/2020-12/schema"},
            },
        },
    }
    server = parse_server_manifest(_document(), source="s")
    specs, refusals = tool_specs(server, _discovery(remote_in, remote_out, missing, local), BRIDGE)
    assert [spec.name for spec in specs] == ["local"]
    assert len(refusals) == 3
    assert "'fetch_in'" in refusals[0] and url in refusals[0] and "inputSchema" in refusals[0]
    assert "'fetch_out'" in refusals[1] and url in refusals[1] and "outputSchema" in refusals[1]
    assert "#/$defs/nowhere" in refusals[2]
    assert specs[0].argument_errors({"a": "x"}) and not specs[0].argument_errors({"a": 1})
    assert _connections(sock) == 0


def test_a_remote_ref_that_slipped_through_answers_an_error_not_a_fetch(listener: tuple[str, socket.socket]) -> None:
    """Our own choice: a validator never retrieves; an unresolvable ref at validation is a readable message."""
    url, sock = listener
    server = parse_server_manifest(_document(), source="s")
    (spec,), _ = tool_specs(server, _discovery(PLAIN_ECHO), BRIDGE)
    schema = {"type": "object", "properties": {"a": {"$ref": url}}}
    manifest = spec.manifest.model_copy(update={"input_schema": schema, "output_schema": schema})
    slipped = ToolSpec(manifest=manifest, tool=spec.tool, source="s")
    assert "does not resolve" in slipped.argument_errors({"a": 1})[0]
    assert "does not resolve" in slipped.result_errors({"content": [], "structuredContent": {"a": 1}})[0]
    assert _connections(sock) == 0


@pytest.mark.parametrize("follow_tools", [DEFAULT_FOLLOW_TOOLS, ("follow_status", "follow_respond", "follow_cancel")])
def test_a_server_tool_named_like_a_follow_tool_is_left_out_naming_it_and_the_prefix(
    follow_tools: tuple[str, str, str],
) -> None:
    """Our own choice: the follow tools are how hosts without the extension follow tasks; no server tool takes one."""
    listed = [{**PLAIN_ECHO, "name": name} for name in follow_tools]
    server = parse_server_manifest(_document(), source="s")
    specs, refusals = tool_specs(server, _discovery(*listed, PLAIN_ECHO), BRIDGE, follow_tools)
    assert [spec.name for spec in specs] == ["echo"]
    assert len(refusals) == 3
    for name, refusal in zip(follow_tools, refusals, strict=True):
        assert repr(name) in refusal and "follow tool" in refusal and "spec.toolNamePrefix" in refusal
    prefixed = parse_server_manifest(_document(toolNamePrefix="srv_"), source="s")
    specs, refusals = tool_specs(prefixed, _discovery(*listed), BRIDGE, follow_tools)
    assert [spec.name for spec in specs] == [f"srv_{name}" for name in follow_tools] and refusals == []


def test_a_tool_listed_twice_is_served_once_the_first_listed() -> None:
    """Our own choice: a repeated name (a listing bug) keeps the first, with a reason, not the last silently."""
    first = {**PLAIN_ECHO, "description": "first"}
    second = {**PLAIN_ECHO, "description": "second"}
    server = parse_server_manifest(_document(), source="s")
    specs, refusals = tool_specs(server, _discovery(first, second), BRIDGE)
    assert [spec.tool.description for spec in specs] == ["first"]
    assert len(refusals) == 1 and "'echo' is listed twice" in refusals[0]


def test_a_listing_over_the_cap_is_refused_whole_saying_why() -> None:
    """Our own choice: a server listing more than MAX_SERVER_TOOLS tools is refused, not checked tool by tool."""
    listed = [{**PLAIN_ECHO, "name": f"t{i}"} for i in range(MAX_SERVER_TOOLS + 1)]
    server = parse_server_manifest(_document(), source="s")
    specs, refusals = tool_specs(server, _discovery(*listed), BRIDGE)
    assert specs == [] and len(refusals) == 1
    assert f"lists {MAX_SERVER_TOOLS + 1} tools" in refusals[0] and str(MAX_SERVER_TOOLS) in refusals[0]
    specs, refusals = tool_specs(server, _discovery(*listed[:MAX_SERVER_TOOLS]), BRIDGE)
    assert len(specs) == MAX_SERVER_TOOLS and refusals == []
