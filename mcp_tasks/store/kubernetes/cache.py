"""What `KubernetesTaskStore` keeps of each McpTask it has seen: a `CacheEntry`, whole or as a summary.

A finished task is kept as a packed summary (its object without what only readers of its result or
history need, compact JSON, about 1 kB) unless it is among the most recently finished or read ones.
Pure: no I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.store.kubernetes import mapping

_SUMMARY_DROPS: Final = {
    "spec": ("arguments", "preInputResponses", "inputResponses", "clientCapabilities"),
    "status": ("result", "progress", "inputRequests", "issuedInputKeys", "conditions"),
}
"""What a finished task's summary leaves out: everything only a reader of its result or history needs."""


@dataclass(slots=True)
class CacheEntry:
    """One cached McpTask: whole (`obj`), or, once finished, as a packed summary (and whole while recent)."""

    version: str
    tenant: str
    subject: str
    issuer: str  # `spec.owner.issuer`, or the store's legacy issuer when the object names none
    finished: bool
    expires_at: float  # createdAt + ttlMs, Unix seconds; only meaningful once finished
    obj: JsonObject | None = None
    summary: bytes | None = None
    parsed: mapping.Parsed | None = None  # of `obj`, parsed lazily, once per resourceVersion
    tracked: bool = False  # the stored object has `managedFields` (the next write resets them)

    def view(self) -> JsonObject:
        """The object as far as it is kept: whole when it is, else its summary."""
        if self.obj is not None:
            return self.obj
        assert self.summary is not None
        loaded: JsonObject = json.loads(self.summary)
        return loaded


def summary_of(obj: JsonObject) -> bytes:
    """A finished McpTask without what only readers of its result need, as compact JSON."""
    kept: dict[str, Any] = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": obj["metadata"]}
    for part, drops in _SUMMARY_DROPS.items():
        kept[part] = {key: value for key, value in (obj.get(part) or {}).items() if key not in drops}
    return json.dumps(kept, separators=(",", ":")).encode()


def expires_at(obj: JsonObject) -> float:
    """When a finished McpTask expires: `createdAt` + `ttlMs`, Unix seconds (`inf` when malformed)."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    try:
        created = datetime.fromisoformat(str(spec["createdAt"]).replace("Z", "+00:00")).timestamp()
        return created + int(status.get("ttlMs") or spec["ttlMs"]) / 1000
    except (KeyError, TypeError, ValueError):
        return float("inf")  # malformed: never expired by us (reads treat it as missing)
