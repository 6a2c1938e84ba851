"""Command line: `mcptasks serve` (embedded default). Wiring only."""

from mcp_tasks.cli.main import main

__all__ = ["main"]
