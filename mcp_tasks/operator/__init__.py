"""Kubernetes operator (kopf): one level-based reconcile per McpTask (`reconciler`, the pure `decide`) that
runs it as a Job, warm tools' Deployments and their tasks (`warm_tools`, `warm_tasks`), Events, conditions
and expiry; composed in `app`. docs/kubernetes.md.
"""

__all__: list[str] = []
