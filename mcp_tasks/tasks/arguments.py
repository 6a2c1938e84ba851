"""Large tool arguments kept as an artifact of their task, as large results are (ARCHITECTURE.md §Results
and artifacts).

A store that bounds its objects (the Kubernetes store: one McpTask stays far below etcd's request
limit) keeps arguments above its inline cap out of the object: `split` takes them out, compact JSON, to be
written as the task's artifact `arguments-<sha256>.json` (deleted with the task, readable by its owner through
`resources/read`) and the record carries an `ArgumentsRef` with empty `arguments`. The executor reads
them back with `load` when it hands the run its arguments; a record without a reference (every
embedded task, McpTasks written before) carries its arguments inline.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Final

from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.tasks.interfaces import ArtifactStore
from mcp_tasks.tasks.record import ArgumentsRef, TaskRecord

ARGUMENTS_ARTIFACT_MIME: Final = "application/json"
DEFAULT_INLINE_ARGUMENTS_MAX_BYTES: Final = 64 * 1024
"""Largest argument object kept inside an McpTask, in bytes of compact JSON; larger ones are artifacts."""


class ArgumentsUnavailable(Exception):
    """A task's arguments artifact is missing or does not match its reference (size or SHA-256)."""


def encode(arguments: JsonObject) -> bytes:
    """Compact UTF-8 JSON of an argument object, as `split` stores it."""
    return json.dumps(arguments, separators=(",", ":"), ensure_ascii=False).encode()


def split(record: TaskRecord, inline_max_bytes: int) -> tuple[TaskRecord, bytes | None]:
    """`(record, None)` when its arguments take at most `inline_max_bytes` bytes of compact JSON (or are
    already an artifact), else `(the record with empty arguments and an ArgumentsRef, the bytes to store)`.

    The artifact's name carries the SHA-256 of its content, so writing it for a task id that turns out
    to be taken (a create that conflicts) never replaces another task's arguments. The caller writes the
    bytes with `ArtifactStore.put(record.task_id, ref.name, data, ARGUMENTS_ARTIFACT_MIME)` before the
    record becomes visible.
    """
    if record.arguments_ref is not None:
        return record, None
    data = encode(record.arguments)
    if len(data) <= inline_max_bytes:
        return record, None
    digest = hashlib.sha256(data).hexdigest()
    ref = ArgumentsRef(name=f"arguments-{digest}.json", size_bytes=len(data), sha256=digest)
    return dataclasses.replace(record, arguments={}, arguments_ref=ref), data


async def load(
    task_id: str | None, arguments: JsonObject, ref: ArgumentsRef | None, artifacts: ArtifactStore
) -> JsonObject:
    """The task's arguments: `arguments` when `ref` is `None`, else the artifact `ref` names, checked.

    Raises:
        ArgumentsUnavailable: the artifact is missing, or its size or SHA-256 differs from `ref`.
        OSError: the artifact store cannot be read now (retry later).
    """
    if ref is None:
        return arguments
    if task_id is None:
        raise ArgumentsUnavailable("arguments stored as an artifact need their task")
    artifact = await artifacts.get(task_id, ref.name)
    if artifact is None:
        raise ArgumentsUnavailable(f"task {task_id}: its arguments artifact {ref.name} is missing")
    data = artifact.data
    if len(data) != ref.size_bytes or hashlib.sha256(data).hexdigest() != ref.sha256:
        raise ArgumentsUnavailable(f"task {task_id}: its arguments artifact {ref.name} does not match its reference")
    loaded = json.loads(data)
    if not isinstance(loaded, dict):
        raise ArgumentsUnavailable(f"task {task_id}: its arguments artifact {ref.name} is not a JSON object")
    return loaded


__all__ = [
    "ARGUMENTS_ARTIFACT_MIME",
    "DEFAULT_INLINE_ARGUMENTS_MAX_BYTES",
    "ArgumentsUnavailable",
    "encode",
    "load",
    "split",
]
