"""Kubernetes operator (kopf): McpTask → Job. Not built yet; see docs/design.md §Kubernetes."""

__all__: list[str] = []
