"""Embedded executor: one local process per task, worker leases in the task store, worker API on loopback."""

from mcp_tasks.runner.runner import LocalRunner, RunnerSettings

__all__ = ["LocalRunner", "RunnerSettings"]
