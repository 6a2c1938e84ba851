"""The bridge: the MCP client of an existing MCP server, run beside it as an McpServer tool's process.

Tool side, like `runtime`: it speaks the worker API through `mcp_tasks.runtime` and the server's protocol
through the official `mcp` SDK (the `servers` extra), and holds the mapping between the two
(docs/mcp-servers.md). No executor imports it; they run `python -m mcp_tasks.bridge`.
"""

__all__: list[str] = []
