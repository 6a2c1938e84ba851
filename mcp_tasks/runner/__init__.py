"""Embedded executor: one local process per task or a call on a warm worker, under worker leases in the task
store, worker API on loopback. Its parts (claims, supervision, adoption, synchronous runs) also make up the
operator's warm-task runner.
"""

from mcp_tasks.runner.runner import LocalRunner, RunnerSettings

__all__ = ["LocalRunner", "RunnerSettings"]
