"""Scopes per tool (`spec.requiredScopes`) with tokens of a real issuer: what a principal sees and may call.

MCP §Authorization (scope challenge) and RFC 6750 §3.1: calling a tool without its scope is `403` with
`error="insufficient_scope"` and the `scope` needed; `tools/list` lists only the tools a principal may call.
"""

from __future__ import annotations

import secrets
from dataclasses import replace
from pathlib import Path

import aiohttp
import yaml

from tests.conftest import REPO, TOOL_DIRS, McpHttp, server_settings, serving
from tests.identity.conftest import trusting
from tests.identity.provider import Hydra

SCOPE = "tools:greet"
METADATA = "/.well-known/oauth-protected-resource/mcp"


def scoped_tools(folder: Path) -> Path:
    """A folder with `scoped_greet`: the conformance `greet`, open only to tokens with `tools:greet`."""
    folder.mkdir()
    manifest = {
        "apiVersion": "mcptasks.io/v1alpha1",
        "kind": "McpTool",
        "metadata": {"name": "scoped-greet"},
        "spec": {
            "name": "scoped_greet",
            "description": "Greets by name, for callers holding the tools:greet scope.",
            "inputSchema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
            "execution": {"taskPolicy": "never"},
            "requiredScopes": [SCOPE],
            "container": {
                "image": "ghcr.io/mcp-tasks/conformance-fixtures:0.1.0",
                "command": ["python", str(REPO / "conformance" / "tools" / "fixtures.py"), "greet"],
            },
        },
    }
    (folder / "scoped.yaml").write_text(yaml.safe_dump(manifest))
    return folder


async def test_a_tool_with_required_scopes_is_listed_and_callable_only_with_them(
    tmp_path: Path, hydra: Hydra, http_session: aiohttp.ClientSession
) -> None:
    settings = server_settings(tmp_path / "data")
    settings = replace(settings, serve=replace(settings.serve, tools_dirs=(*TOOL_DIRS, scoped_tools(tmp_path / "t"))))
    async with serving(trusting(settings, hydra.issuer)) as server:
        granted_id, plain_id = f"granted-{secrets.token_hex(4)}", f"plain-{secrets.token_hex(4)}"
        granted_secret = await hydra.create_client(granted_id, audiences=[server.url], scope=SCOPE)
        plain_secret = await hydra.create_client(plain_id, audiences=[server.url])
        granted_token = await hydra.client_credentials(granted_id, granted_secret, server.url, SCOPE)
        granted = McpHttp(http_session, server.url, token=granted_token)
        plain_token = await hydra.client_credentials(plain_id, plain_secret, server.url)
        plain = McpHttp(http_session, server.url, token=plain_token)

        seen = (await granted.request("tools/list")).result
        assert "scoped_greet" in [tool["name"] for tool in seen["tools"]] and seen["cacheScope"] == "private"
        hidden = (await plain.request("tools/list")).result
        assert "scoped_greet" not in [tool["name"] for tool in hidden["tools"]] and hidden["cacheScope"] == "private"
        assert "greet" in [tool["name"] for tool in hidden["tools"]], "a tool without requiredScopes stays open"

        called = await granted.request("tools/call", {"name": "scoped_greet", "arguments": {"name": "Ada"}})
        assert called.result["content"][0]["text"] == "Hello, Ada!"
        base = server.url.removesuffix("/mcp")
        without_name: dict[str, str | None] = {"Mcp-Name": None}
        for headers in ({}, without_name):  # from the header before the body, and from the body
            refused = await plain.request(
                "tools/call", {"name": "scoped_greet", "arguments": {"name": "Eve"}}, headers=headers
            )
            assert refused.status == 403, refused.body
            assert refused.headers["WWW-Authenticate"] == (
                f'Bearer resource_metadata="{base}{METADATA}", error="insufficient_scope", '
                f'error_description="the token lacks a scope", scope="{SCOPE}"'
            )
        async with http_session.get(base + METADATA) as response:
            assert (await response.json())["scopes_supported"] == [SCOPE]
