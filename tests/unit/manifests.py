"""A minimal valid McpTool for unit tests."""

from __future__ import annotations

from typing import Any

from mcp_tasks.tasks.tools import ToolSpec, parse_manifest


def tool_spec(container: dict[str, Any] | None = None, **execution: Any) -> ToolSpec:
    """Tool `t` (inputSchema `{"type": "object"}`) with `container` (default: command `x`) and `execution`."""
    return parse_manifest(
        {
            "apiVersion": "mcptasks.io/v1alpha1",
            "kind": "McpTool",
            "metadata": {"name": "t"},
            "spec": {
                "name": "t",
                "description": "d",
                "inputSchema": {"type": "object"},
                "container": container or {"command": ["x"]},
                "execution": execution,
            },
        },
        source="test",
    )
