"""`FileArtifactStore`: large results as files under the data folder, never in a database row.

Layout: `<root>/<taskId>/<name>` plus `<name>.mime`. Names are validated so a path can never escape
the root. File writes go through `asyncio.to_thread` (blocking file I/O must not stall the loop).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from pathlib import Path
from typing import Final

from mcp_tasks.tasks.interfaces import Artifact
from mcp_tasks.tasks.results import artifact_uri

_SAFE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def _is_artifact_name(name: str) -> bool:
    """A safe file name that is not one of the store's own side files (`<name>.mime`, temporaries)."""
    return bool(_SAFE.match(name)) and not name.endswith(".mime")


def _write_durably(folder: Path, name: str, data: bytes) -> None:
    """Write `folder/name` atomically: a temporary file, fsync, rename (blocking; call in a thread)."""
    temporary = folder / f".{name}.tmp"
    with temporary.open("wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    temporary.replace(folder / name)


def _fsync_folder(folder: Path) -> None:
    """Flush a folder to disk (fsync) so the renames in it survive a power loss (POSIX; blocking)."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


class FileArtifactStore:
    """An `ArtifactStore` on the local file system.

    Args:
        root: folder that holds one sub-folder per task.
        max_bytes: largest artifact accepted, in bytes (results stay bounded even as artifacts).
    """

    def __init__(self, root: Path, max_bytes: int) -> None:
        self.root = root
        self.max_bytes = max_bytes

    async def open(self) -> None:
        """Nothing to open (the folders are made on first write); the S3 store's counterpart connects."""

    async def aclose(self) -> None:
        """Nothing to close."""

    def _dir(self, task_id: str) -> Path:
        if not _SAFE.match(task_id):
            raise ValueError("invalid task id for an artifact path")
        return self.root / task_id

    async def put(self, task_id: str, name: str, data: bytes, mime_type: str) -> str:
        """Write the artifact durably (write, fsync, rename) and return its URI.

        Raises:
            ValueError: `name` is not a safe file name, or `data` exceeds `max_bytes`.
            OSError: the file system refused the write (full, read-only); nothing is left half-written.
        """
        if not _is_artifact_name(name):
            raise ValueError(f"invalid artifact name {name!r}")
        if len(data) > self.max_bytes:
            raise ValueError(f"artifact of {len(data)} bytes exceeds the limit of {self.max_bytes}")
        folder = self._dir(task_id)

        def write() -> None:
            folder.mkdir(parents=True, exist_ok=True)
            # The MIME type is as durable as the data: both written, fsynced and renamed into place, the
            # side file first, then the folder fsynced, so the artifact never appears without its type.
            _write_durably(folder, f"{name}.mime", mime_type.encode("utf-8"))
            _write_durably(folder, name, data)
            _fsync_folder(folder)

        await asyncio.to_thread(write)
        return artifact_uri(task_id, name)

    async def get(self, task_id: str, name: str) -> Artifact | None:
        """Read an artifact, or `None` when it does not exist."""
        if not _is_artifact_name(name) or not _SAFE.match(task_id):
            return None
        path = self._dir(task_id) / name

        def read() -> Artifact | None:
            if not path.is_file():
                return None
            mime_path = path.with_name(f"{name}.mime")
            mime = mime_path.read_text(encoding="utf-8") if mime_path.is_file() else "application/octet-stream"
            return Artifact(data=path.read_bytes(), mime_type=mime)

        return await asyncio.to_thread(read)

    async def delete_task(self, task_id: str) -> None:
        """Remove every artifact of a task (no error when there are none)."""
        if not _SAFE.match(task_id):
            return
        await asyncio.to_thread(shutil.rmtree, self._dir(task_id), True)
