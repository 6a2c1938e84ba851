"""`KeptOutcomes`: outcomes tools reported that the task store could not take before their executor stopped.

A tool that posts its result while the task store cannot write (disk full, a read-only file) is answered
503 and retries; if the executor stops meanwhile (a graceful stop), its supervisor cannot record the
outcome either. Rather than let the next start find an unfinished task whose process is gone and declare
its outcome unknown, the supervisor keeps the outcome in a file of the state folder
(`<task id>.outcome.json`, written atomically and fsynced) and leaves the task unfinished, its lease
naming the run. The next start's claim finds the file for the task's attempt and records the outcome
(docs/design.md §7). Only an executor with a persistent state folder keeps them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from mcp_tasks.worker.executions import Finished


class KeptOutcomes:
    """Outcomes kept in `folder` (created on first use) for the next start, one file per task."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def _path(self, task_id: str) -> Path:
        return self.folder / f"{task_id}.outcome.json"

    def save(self, task_id: str, attempt: int, outcome: Finished) -> None:
        """Durably keep `outcome` of attempt `attempt` of `task_id` (replacing any older one).

        Blocking (file writes and fsyncs): call it in a thread.

        Raises:
            OSError: the folder cannot be written either (the outcome stays unknown).
        """
        self.folder.mkdir(parents=True, exist_ok=True)
        body = {
            "attempt": attempt,
            "result": outcome.result,
            "error": outcome.error,
            "statusMessage": outcome.status_message,
        }
        final = self._path(task_id)
        partial = final.with_suffix(".partial")
        with partial.open("w", encoding="utf-8") as handle:
            json.dump(body, handle, separators=(",", ":"))
            handle.flush()
            os.fsync(handle.fileno())
        partial.replace(final)
        directory = os.open(self.folder, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)

    def find(self, task_id: str, attempt: int) -> Finished | None:
        """The outcome kept for attempt `attempt` of `task_id`, or `None` (none, another attempt's, or unreadable).

        Blocking (a file read): call it in a thread.
        """
        try:
            data: Any = json.loads(self._path(task_id).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("attempt") != attempt:
            return None
        result, error = data.get("result"), data.get("error")
        if not isinstance(result, dict) and not isinstance(error, dict):
            return None
        message = data.get("statusMessage")
        return Finished(
            result=result if isinstance(result, dict) else None,
            error=error if isinstance(error, dict) else None,
            status_message=message if isinstance(message, str) else None,
        )

    def discard(self, task_id: str) -> None:
        """Forget the outcome kept for `task_id` (it was recorded, or belongs to an attempt that is over)."""
        self._path(task_id).unlink(missing_ok=True)


__all__ = ["KeptOutcomes"]
