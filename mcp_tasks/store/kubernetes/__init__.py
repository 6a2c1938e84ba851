"""Kubernetes task store and tool catalog: `McpTask` and `McpTool` custom resources (kubernetes_asyncio)."""

from mcp_tasks.store.kubernetes.catalog import KubernetesToolCatalog
from mcp_tasks.store.kubernetes.store import KubernetesTaskStore

__all__ = ["KubernetesTaskStore", "KubernetesToolCatalog"]
