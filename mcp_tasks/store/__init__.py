"""`TaskStore`, `ToolCatalog` and `ArtifactStore` implementations.

`sqlite` is the embedded default; `kubernetes` keeps each task as an McpTask custom resource (status
subresource, etcd) behind one API edge (`kubernetes.client`).
"""

from mcp_tasks.store import artifacts, manifests, sqlite

__all__ = ["artifacts", "manifests", "sqlite"]
