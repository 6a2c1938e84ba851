"""`KeptOutcomes`: outcomes tools reported that the task store could not take before their executor stopped.

A tool that posts its result while the task store cannot write (disk full, a read-only file) is answered
503 and retries; if the executor stops meanwhile (a graceful stop), its supervisor cannot record the
outcome either. Rather than let the next start find an unfinished task whose process is gone and declare
its outcome unknown, the supervisor keeps the outcome in a file of the state folder
(`<task id>.outcome.json`, written atomically and fsynced) and leaves the task unfinished, its lease
naming the run. The next start's claim finds the file for the task's attempt and records the outcome
(docs/design.md §7). Only an executor with a persistent state folder keeps them.

A kept outcome whose task ended another way (cancelled, failed by a restart rule, expired and deleted)
would stay for ever: `discard_settled` removes the files of tasks that are finished or gone, run at
start-up and by every expiry sweep (`LocalRunner._sweep`; its first run is at start).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path
from typing import Any, Final

from mcp_tasks.tasks.errors import TaskNotFound
from mcp_tasks.tasks.interfaces import TaskStore
from mcp_tasks.worker.executions import Finished

logger = logging.getLogger("mcp_tasks.runner")

SUFFIXES: Final = (".outcome.json", ".outcome.partial")
"""A kept outcome's file, and the one a save that was cut short leaves behind."""


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
        """Forget the outcome kept for `task_id` (it was recorded, or belongs to an attempt that is over),
        with any partial file a save cut short left.

        Blocking (file deletes): call it in a thread.
        """
        self._path(task_id).unlink(missing_ok=True)
        self._path(task_id).with_suffix(".partial").unlink(missing_ok=True)

    def task_ids(self) -> list[str]:
        """The task ids with a kept (or partially saved) outcome here, sorted; none when the folder is absent.

        Blocking (a directory listing): call it in a thread.
        """
        try:
            names = [entry.name for entry in self.folder.iterdir()]
        except FileNotFoundError:
            return []
        return sorted({name.removesuffix(s) for name in names for s in SUFFIXES if name.endswith(s)})


async def discard_settled(kept: KeptOutcomes, store: TaskStore) -> list[str]:
    """Remove the kept outcomes of tasks that are terminal or gone from `store`; the task ids removed.

    An unfinished task's kept outcome stays: the next claim records it (or, for another attempt, ignores it).

    Raises:
        StoreUnavailable: the store cannot be read (nothing more is removed; the next sweep tries again).
    """
    removed: list[str] = []
    for task_id in await asyncio.to_thread(kept.task_ids):
        try:
            settled = (await store.get(task_id)).status.is_terminal
        except TaskNotFound:
            settled = True
        if settled:
            await asyncio.to_thread(kept.discard, task_id)
            removed.append(task_id)
    if removed:
        logger.info("removed %d kept outcomes of finished or deleted tasks", len(removed))
    return removed


__all__ = ["KeptOutcomes", "discard_settled"]
