"""Client side: the tasks extension for the official `mcp` SDK client (`pip install 'mcp-tasks[client]'`)."""

from mcp_tasks.client.sdk import TaskCancelled, TaskFailed, TasksClientExtension

__all__ = ["TaskCancelled", "TaskFailed", "TasksClientExtension"]
