"""Task domain: records, the state machine, ownership, tool manifests, and the store/catalog interfaces.

No HTTP, no Kubernetes, no SQL (ARCHITECTURE.md, layer `tasks`).
"""

from mcp_tasks.tasks import errors, ids, interfaces, owner, record, results, tools, transitions

__all__ = ["errors", "ids", "interfaces", "owner", "record", "results", "tools", "transitions"]
