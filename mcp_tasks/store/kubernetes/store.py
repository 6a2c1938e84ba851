"""`KubernetesTaskStore`: one `McpTask` custom resource per task, etcd as the consistent store.

- `create` POSTs the McpTask (name = taskId) and returns only after the API server answered 201,
  so any gateway replica can read it at once.
- Reads come from a watch-fed cache (`Reflector`); a miss falls back to an authoritative GET before
  anyone is told "not found" (a task created through replica A is readable through replica B at once).
- Every write is compare-and-swap: a PUT carrying the `resourceVersion` the record was read at, to the
  main resource for client intent (`spec`) or to the status subresource for what the executor observed
  (`status`); see `mapping.plan_write`. A `409 Conflict` becomes `VersionConflict`, which
  `tasks.interfaces.transact` retries a bounded number of times.

API errors become domain errors here; anything else propagates as `kubernetes_asyncio` `ApiException`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import aiohttp
from kubernetes_asyncio.client import ApiClient, CustomObjectsApi, V1DeleteOptions, V1Preconditions
from kubernetes_asyncio.client.exceptions import ApiException
from pydantic import ValidationError

from mcp_tasks.observability import metrics
from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.protocol.models import TaskStatus
from mcp_tasks.store.changes import ChangeFeed
from mcp_tasks.store.kubernetes import mapping
from mcp_tasks.store.kubernetes.resources import GROUP, TASK_PLURAL, VERSION
from mcp_tasks.store.kubernetes.watch import Reflector
from mcp_tasks.tasks.errors import ResultTooLarge, StoreUnavailable, TaskNotFound, UnstorableValue, VersionConflict
from mcp_tasks.tasks.interfaces import Clock, Unfinished, utc_now
from mcp_tasks.tasks.owner import Owner
from mcp_tasks.tasks.record import TaskRecord

logger = logging.getLogger("mcp_tasks.store.kubernetes")

_UNFINISHED: Final = frozenset(status.value for status in TaskStatus if not status.is_terminal)
_OPERATIONS: Final = {
    "get_namespaced_custom_object": "get",
    "create_namespaced_custom_object": "create",
    "replace_namespaced_custom_object": "replace",
    "replace_namespaced_custom_object_status": "replace_status",
    "delete_namespaced_custom_object": "delete",
    "list_namespaced_custom_object": "list",
}
"""API calls by the operation label they are timed under (`mcptasks_store_operation_duration_seconds`)."""

DEFAULT_MAX_OBJECT_BYTES: Final = 512 * 1024
EXPIRY_CONCURRENCY: Final = 16
"""DELETE requests in flight at once while expired McpTasks are removed."""
"""Upper bound of one serialized McpTask, in bytes: well under etcd's 1.5 MiB request limit, leaving room
for `managedFields`. A backstop behind the inline-result cap; larger results are artifacts."""


@dataclass(slots=True)
class _Entry:
    obj: JsonObject
    record: TaskRecord | None = None  # decoded lazily, once per resourceVersion


def _owned_by(obj: JsonObject, owner: Owner) -> bool:
    """Tell whether the McpTask `obj` belongs to `owner`, reading only `spec.owner` (no full decode)."""
    stored = (obj.get("spec") or {}).get("owner") or {}
    return bool(stored.get("tenant") == owner.tenant and stored.get("subject") == owner.subject)


def _newer(candidate: JsonObject, current: JsonObject | None) -> bool:
    """Tell whether `candidate` is at least as new as `current`.

    resourceVersions are opaque, but every etcd-backed API server issues increasing integers; when
    both parse, compare them so a late watch event never rolls back a newer write response.
    """
    if current is None:
        return True
    new_rv = str(candidate["metadata"]["resourceVersion"])
    old_rv = str(current["metadata"]["resourceVersion"])
    if new_rv.isdigit() and old_rv.isdigit():
        return int(new_rv) >= int(old_rv)
    return True


class KubernetesTaskStore:
    """A `TaskStore` over McpTask custom resources in one namespace.

    Args:
        api_client: an open kubernetes_asyncio `ApiClient` (in-cluster or kubeconfig).
        namespace: where McpTasks live (the gateway's namespace).
        clock: UTC clock (tests inject one).
        watch_timeout_s: server-side timeout of one WATCH request in seconds; the watch then resumes.
        max_object_bytes: largest McpTask this store writes; a larger record raises `ResultTooLarge`
            (for results) or `UnstorableValue` (for arguments and answers).
        request_timeout_s: how long one API request may take, in seconds, before `StoreUnavailable`.
    """

    def __init__(
        self,
        api_client: ApiClient,
        namespace: str,
        clock: Clock = utc_now,
        watch_timeout_s: int = 300,
        max_object_bytes: int = DEFAULT_MAX_OBJECT_BYTES,
        request_timeout_s: float = 20.0,
    ) -> None:
        self.namespace = namespace
        self.clock = clock
        self._api = CustomObjectsApi(api_client)
        self._api_client = api_client
        self._max_object_bytes = max_object_bytes
        self._request_timeout_s = request_timeout_s
        self._cache: dict[str, _Entry] = {}
        self._feed = ChangeFeed()
        self._listeners: list[Callable[[str], None]] = []
        self.conflicts = 0
        """Compare-and-swap writes that lost to a concurrent writer (observability)."""
        self.reflector = Reflector(
            api_client,
            group=GROUP,
            version=VERSION,
            plural=TASK_PLURAL,
            namespace=namespace,
            on_replace=self._replace_all,
            on_event=self._on_event,
            watch_timeout_s=watch_timeout_s,
        )

    async def open(self) -> None:
        """List the namespace's McpTasks and start watching them.

        Raises:
            ApiException: the McpTask CRD is not installed (404) or the credentials may not list McpTasks (403).
        """
        await self.reflector.start()

    async def aclose(self) -> None:
        """Stop watching (the API client belongs to the caller)."""
        await self.reflector.aclose()

    # -- cache -----------------------------------------------------------------------------------

    def _replace_all(self, items: Sequence[JsonObject]) -> None:
        fresh = {str(item["metadata"]["name"]): item for item in items}
        gone = [name for name in self._cache if name not in fresh]
        for name in gone:
            del self._cache[name]
        for item in fresh.values():
            self._remember(item, notify=False)
        self._notify([*fresh, *gone], created=True)

    def _on_event(self, kind: str, obj: JsonObject) -> None:
        name = str(obj["metadata"]["name"])
        if kind == "DELETED":
            self._cache.pop(name, None)
            self._notify([name])
            return
        self._remember(obj, notify=True, created=kind == "ADDED")

    def _remember(self, obj: JsonObject, *, notify: bool, created: bool = False) -> _Entry:
        name = str(obj["metadata"]["name"])
        current = self._cache.get(name)
        same = current is not None and current.obj["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"]
        if current is not None and (same or not _newer(obj, current.obj)):
            return current
        entry = _Entry(obj)
        self._cache[name] = entry
        if notify:
            self._notify([name], created=created)
        return entry

    def add_change_listener(self, listener: Callable[[str], None]) -> Callable[[], None]:
        """Call `listener(task_id)` for every McpTask this store sees change (watch events, its own
        writes, deletions, relists); it must not block. Returns a function that removes it.
        """
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def _notify(self, names: Sequence[str], created: bool = False) -> None:
        self._feed.changed(names)
        for listener in self._listeners:
            for name in names:
                listener(name)
        if created:
            self._feed.created()

    def _decode(self, entry: _Entry) -> TaskRecord:
        """The record of a cached object, decoded once per resourceVersion.

        Raises:
            TaskNotFound: the object is not a well-formed McpTask (edited by hand?); it is logged.
        """
        if entry.record is None:
            try:
                entry.record = mapping.to_record(entry.obj)
            except (ValidationError, KeyError, ValueError) as exc:
                name = entry.obj.get("metadata", {}).get("name")
                logger.warning("McpTask %s/%s is malformed (%s); treating it as missing", self.namespace, name, exc)
                raise TaskNotFound(str(name)) from exc
        return entry.record

    # -- TaskStore -------------------------------------------------------------------------------

    async def create(self, record: TaskRecord) -> TaskRecord:
        """POST the McpTask; return once the API server answered 201 (with its `resourceVersion`).

        Raises:
            VersionConflict: an McpTask of this name already exists.
            ResultTooLarge: the serialized task exceeds `max_object_bytes`.
            UnstorableValue: an argument or answer holds an integer beyond 64 bits.
        """
        body = mapping.new_object(record, self.namespace)
        self._check_size(body, record.task_id, "spec")
        try:
            created = await self._request(
                self._api.create_namespaced_custom_object, GROUP, VERSION, self.namespace, TASK_PLURAL, body
            )
        except ApiException as exc:
            if exc.status == 409:
                raise VersionConflict(f"task {record.task_id} already exists") from exc
            raise
        return self._decode(self._remember(created, notify=True, created=True))

    async def get(self, task_id: str, owner: Owner | None = None, *, fresh: bool = False) -> TaskRecord:
        """Read from the cache, or from the API server on a miss or when `fresh`; foreign, expired and
        missing look alike.

        Alike in timing too: an unknown id costs an authoritative GET (a cache miss must not answer "not
        found" by itself), so a cached task of another owner costs one as well before it is refused.

        Raises:
            TaskNotFound: no such McpTask, another owner's, or expired.
        """
        entry = await self._fetch(task_id) if fresh else self._cache.get(task_id)
        if entry is not None and owner is not None and not _owned_by(entry.obj, owner):
            await self._fetch(task_id)  # a foreign task costs what an unknown id costs: one authoritative read
            raise TaskNotFound(task_id)
        if entry is None:
            entry = await self._fetch(task_id)
        if entry is None:
            raise TaskNotFound(task_id)
        record = self._decode(entry)
        if owner is not None and (record.owner != owner or record.is_expired(self.clock())):
            raise TaskNotFound(task_id)
        return record

    async def raw(self, task_id: str) -> JsonObject | None:
        """The McpTask object itself (cache, else GET), or `None`; for the operator's owner references."""
        entry = self._cache.get(task_id) or await self._fetch(task_id)
        return None if entry is None else entry.obj

    async def _fetch(self, task_id: str) -> _Entry | None:
        """Authoritative GET (a quorum read of etcd); refreshes the cache."""
        if not _valid_name(task_id):
            return None
        try:
            obj = await self._request(
                self._api.get_namespaced_custom_object, GROUP, VERSION, self.namespace, TASK_PLURAL, task_id
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return self._remember(obj, notify=False)

    async def compare_and_swap(self, record: TaskRecord) -> TaskRecord:
        """Write `record` if the McpTask is still at `record.version`; return it at the new version.

        Raises:
            VersionConflict: the McpTask changed since `record` was read (409, or the cache is already newer).
            TaskNotFound: the McpTask is gone.
            ResultTooLarge: the serialized task exceeds `max_object_bytes`.
        """
        entry = self._cache.get(record.task_id) or await self._fetch(record.task_id)
        if entry is None:
            raise TaskNotFound(record.task_id)
        if str(entry.obj["metadata"]["resourceVersion"]) != record.version:
            self.conflicts += 1
            metrics.STORE_CONFLICTS.labels("kubernetes").inc()
            await self._fetch(record.task_id)
            raise VersionConflict(f"task {record.task_id} changed since resourceVersion {record.version}")
        plan = mapping.plan_write(entry.obj, record)
        obj = entry.obj
        if plan.spec is not None:
            obj = await self._put(record, {**obj, "spec": mapping.dump(plan.spec)}, status=False)
        if plan.status is not None:
            obj = await self._put(record, {**obj, "status": mapping.dump(plan.status)}, status=True)
        return self._decode(self._remember(obj, notify=True))

    async def _put(self, record: TaskRecord, body: JsonObject, *, status: bool) -> JsonObject:
        self._check_size(body, record.task_id, "status" if status else "spec")
        call = (
            self._api.replace_namespaced_custom_object_status if status else self._api.replace_namespaced_custom_object
        )
        try:
            result: JsonObject = await self._request(
                call, GROUP, VERSION, self.namespace, TASK_PLURAL, record.task_id, body
            )
        except ApiException as exc:
            if exc.status == 409:
                self.conflicts += 1
                metrics.STORE_CONFLICTS.labels("kubernetes").inc()
                await self._fetch(record.task_id)
                raise VersionConflict(f"task {record.task_id} changed since resourceVersion {record.version}") from exc
            if exc.status == 404:
                raise TaskNotFound(record.task_id) from exc
            raise
        return result

    async def _request(self, call: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Any:
        """One API request, bounded by `request_timeout_s`.

        Raises:
            StoreUnavailable: no answer in time, no connection, or a 429/5xx answer.
            ApiException: any other error answer (the caller decides what 404/409 mean).
        """
        done = metrics.timed("kubernetes", _OPERATIONS.get(getattr(call, "__name__", ""), "other"))
        try:
            return await call(*args, _request_timeout=self._request_timeout_s, **kwargs)
        except ApiException as exc:
            if exc.status == 429 or (exc.status or 0) >= 500:
                raise StoreUnavailable(f"the Kubernetes API server answered {exc.status} {exc.reason}") from exc
            raise
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise StoreUnavailable(f"the Kubernetes API server did not answer ({type(exc).__name__})") from exc
        finally:
            done()

    def _check_size(self, body: JsonObject, task_id: str, part: str = "status") -> None:
        """Refuse what the API server would change (integers beyond 64 bits) or etcd would reject (size).

        Raises:
            UnstorableValue: a 64-bit overflow anywhere, or client intent (`part="spec"`) that is too large.
            ResultTooLarge: the executor's status (the result) is too large.
        """
        where = _inexact(body)
        if where is not None:
            where = where.removeprefix("/spec/").removeprefix("/status/")  # name the field as the client knows it
            raise UnstorableValue(
                f"{where} is an integer outside the signed 64-bit range, which the Kubernetes store cannot keep "
                "exactly; use a smaller number or a string"
            )
        size = len(_json_bytes(body))
        if size <= self._max_object_bytes:
            return
        if part == "spec":
            raise UnstorableValue(
                f"the task's arguments and answers take {size} bytes; the Kubernetes store keeps at most "
                f"{self._max_object_bytes} bytes per task: send less data, or a reference to it"
            )
        raise ResultTooLarge(
            f"task {task_id}: McpTask would be {size} bytes (limit {self._max_object_bytes}); "
            "large results must be stored as artifacts"
        )

    async def unfinished(self) -> Unfinished:
        """Non-terminal McpTasks by `status.taskStatus`, and the oldest `spec.createdAt`, from the cache
        (objects are not decoded).
        """
        counts: dict[str, int] = {}
        oldest: str | None = None
        for entry in list(self._cache.values()):
            status = str((entry.obj.get("status") or {}).get("taskStatus") or TaskStatus.WORKING.value)
            if status in _UNFINISHED:
                counts[status] = counts.get(status, 0) + 1
                created = str((entry.obj.get("spec") or {}).get("createdAt") or "")
                if created and (oldest is None or created < oldest):  # RFC 3339 UTC strings sort as times
                    oldest = created
        return Unfinished(counts, None if oldest is None else datetime.fromisoformat(oldest.replace("Z", "+00:00")))

    def unfinished_ids(self) -> list[str]:
        """Ids of the non-terminal McpTasks in the cache (objects are not decoded)."""
        return [
            name
            for name, entry in list(self._cache.items())
            if str((entry.obj.get("status") or {}).get("taskStatus") or TaskStatus.WORKING.value) in _UNFINISHED
        ]

    async def list_runnable(self, now: datetime, limit: int) -> Sequence[TaskRecord]:
        """Non-terminal tasks with no live lease, oldest first (from the cache)."""
        runnable = []
        for record in self._records():
            if record.status.is_terminal or (record.lease is not None and record.lease.expires_at > now):
                continue
            runnable.append(record)
        runnable.sort(key=lambda r: r.created_at)
        return runnable[:limit]

    async def delete_expired(self, now: datetime, limit: int) -> Sequence[str]:
        """Delete up to `limit` terminal McpTasks past `createdAt + ttlMs`, each guarded by its resourceVersion.

        Up to `EXPIRY_CONCURRENCY` DELETE requests are in flight at once, so expiry keeps up with a create
        rate far above one task per round trip. Owned objects (Jobs, Secrets) go with them through their
        owner references (garbage collector).
        """
        expired = sorted((r for r in self._records() if r.is_expired(now)), key=lambda r: r.expires_at)[:limit]
        gate = asyncio.Semaphore(EXPIRY_CONCURRENCY)

        async def delete(record: TaskRecord) -> str | None:
            async with gate:
                return await self._delete_expired(record)

        return [task_id for task_id in await asyncio.gather(*(delete(r) for r in expired)) if task_id is not None]

    async def _delete_expired(self, record: TaskRecord) -> str | None:
        """Delete one expired McpTask at its version; its id, or `None` when it changed or is gone."""
        try:
            await self._request(
                self._api.delete_namespaced_custom_object,
                GROUP,
                VERSION,
                self.namespace,
                TASK_PLURAL,
                record.task_id,
                body=V1DeleteOptions(
                    preconditions=V1Preconditions(resource_version=record.version),
                    propagation_policy="Background",
                ),
            )
        except ApiException as exc:
            if exc.status == 404:
                self._cache.pop(record.task_id, None)  # deleted by another replica
            if exc.status in (404, 409):
                return None
            raise
        self._cache.pop(record.task_id, None)
        self._notify([record.task_id])
        return record.task_id

    async def wait_for_change(self, timeout_s: float, task_id: str | None = None) -> None:
        """Wait for a watch event on `task_id` (or any McpTask), or `timeout_s` seconds."""
        await self._feed.wait_for_change(timeout_s, task_id)

    async def wait_for_new_tasks(self, timeout_s: float) -> None:
        """Wait for an McpTask to be added, or `timeout_s` seconds."""
        await self._feed.wait_for_new_tasks(timeout_s)

    def _records(self) -> list[TaskRecord]:
        """Every well-formed cached record."""
        records = []
        for entry in list(self._cache.values()):
            try:
                records.append(self._decode(entry))
            except TaskNotFound:
                continue
        return records

    def cached_count(self) -> int:
        """McpTasks in the cache (observability and benchmarks)."""
        return len(self._cache)


_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def _valid_name(name: str) -> bool:
    """Could `name` be an McpTask name (DNS subdomain)? Avoids a GET for ids that cannot exist."""
    return bool(_DNS_SUBDOMAIN.match(name))


INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1


def _inexact(value: Any, path: str = "") -> str | None:
    """The JSON path of the first integer the API server would turn into a float, or `None`.

    The API server decodes JSON numbers as int64 or float64: every other value (nulls, strings,
    nesting, arrays, int64 integers) round-trips exactly through preserve-unknown-fields subtrees.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return None if INT64_MIN <= value <= INT64_MAX else path or "/"
    if isinstance(value, dict):
        for key, item in value.items():
            found = _inexact(item, f"{path}/{key}")
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _inexact(item, f"{path}/{index}")
            if found is not None:
                return found
    return None


def _json_bytes(body: Any) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()
