"""Protocol layer: JSON-RPC envelope, error codes and HTTP statuses, header rules, wire models.

Imports nothing of ours above it and does no I/O (ARCHITECTURE.md, layer `protocol`).
"""

from mcp_tasks.protocol import constants, errors, headers, inputs, jsonrpc, models

__all__ = ["constants", "errors", "headers", "inputs", "jsonrpc", "models"]
