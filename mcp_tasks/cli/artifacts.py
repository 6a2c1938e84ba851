"""The artifact store the settings choose: files under the data folder, or an S3-compatible bucket. Wiring only.

Called by `mcptasks serve`, `gateway` and `operator`, which open the store with their other resources and
close it after them. The S3 store's module (and aiobotocore) is imported only when a bucket is set, so
the embedded default runs without the optional `s3` extra.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from mcp_tasks.cli.settings import Settings, SettingsError
from mcp_tasks.store.artifacts import FileArtifactStore
from mcp_tasks.tasks.interfaces import ArtifactStore


class OpenableArtifactStore(ArtifactStore, Protocol):
    """An `ArtifactStore` with a lifetime: `open` before use, `aclose` after (both no-ops for files)."""

    async def open(self) -> None:
        """Connect (the S3 store: create its client and check the bucket)."""
        ...

    async def aclose(self) -> None:
        """Close what `open` opened."""
        ...


def artifact_store(settings: Settings, data_dir: Path, max_bytes: int) -> OpenableArtifactStore:
    """The S3 store when `artifacts.s3_bucket` is set, else files under `data_dir/artifacts`.

    Args:
        settings: the validated settings tree.
        data_dir: the resolved data folder.
        max_bytes: largest artifact accepted, in bytes (the runner's or the operator's limit).

    Raises:
        SettingsError: a bucket is set but the `s3` extra (aiobotocore) is not installed.
    """
    if not settings.artifacts.s3_bucket:
        return FileArtifactStore(data_dir / "artifacts", max_bytes)
    try:
        from mcp_tasks.store import s3
    except ImportError as exc:
        raise SettingsError(
            f"MCPTASKS_S3_BUCKET is set but the S3 client is not installed ({exc.name}): pip install 'mcp-tasks[s3]'"
        ) from exc
    return s3.S3ArtifactStore(settings.artifacts, max_bytes)
