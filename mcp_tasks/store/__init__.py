"""`TaskStore`, `ToolCatalog` and `ArtifactStore` implementations.

`sqlite` is the embedded default; `kubernetes` keeps each task as an McpTask custom resource (status
subresource, etcd) behind one API edge (`kubernetes.client`). Artifacts are files (`artifacts`) or objects
in an S3-compatible bucket (`s3`, imported only when configured: it needs the optional `s3` extra).
"""

from mcp_tasks.store import artifacts, manifests, settings, sqlite

__all__ = ["artifacts", "manifests", "settings", "sqlite"]
