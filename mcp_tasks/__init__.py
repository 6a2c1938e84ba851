"""mcp-tasks: durable MCP Tasks (`io.modelcontextprotocol/tasks`) for long-running tool calls.

Subpackages by layer (ARCHITECTURE.md): `protocol`, `tasks`, `store`, `gateway`, `runner`,
`operator`, `runtime`, `cli`. Importing this package imports none of them.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
