"""`TaskStore`, `ToolCatalog` and `ArtifactStore` implementations.

`sqlite` is the embedded default; `kubernetes` (McpTask custom resources) follows in its own issue.
"""

from mcp_tasks.store import artifacts, manifests, sqlite

__all__ = ["artifacts", "manifests", "sqlite"]
