"""`KubernetesTaskStore`: one `McpTask` custom resource per task, etcd as the consistent store.

- `create` POSTs the McpTask (name = taskId) and returns only after the API server answered 201,
  so any gateway replica can read it at once.
- Reads come from a watch-fed cache (`Reflector`); a miss falls back to an authoritative GET before
  anyone is told "not found" (a task created through replica A is readable through replica B at once).
- The cache costs what the readers need, not what etcd holds: no object keeps its `managedFields`;
  an unfinished task is kept whole (its writers need it); a finished one is kept as a *summary*, its
  object without arguments, answers, result and conditions, packed as compact JSON (about 1 kB). The
  `full_objects` most recently finished or read finished tasks are also kept whole, so a client that
  polls a task to its end and reads the result costs no API request; any other full read of a
  finished task is one authoritative GET. `get(summary=True)` (the operator's reconcile, expiry)
  never needs one.
- Every write is compare-and-swap: a PUT carrying the `resourceVersion` the record was read at, to the
  main resource for client intent (`spec`) or to the status subresource for what the executor observed
  (`status`); see `mapping.plan_write`. A `409 Conflict` becomes `VersionConflict`, which
  `tasks.interfaces.transact` retries a bounded number of times.
- Field ownership (`metadata.managedFields`) is not kept: the API server records it on create (about
  1.6 kB of a finished task's 4.2 kB in etcd, and more in its watch cache), so the first write to an
  object that still has it carries the documented reset (`managedFields: [{}]`). A status write
  cannot reset it (the subresource ignores `metadata`), so the first executor write of a task is
  preceded by one metadata-only PUT of the main resource (the chart lets its operator make exactly that
  change and no other, docs/kubernetes.md §3). An object without `managedFields` stays
  without them through every later update (the API server only starts tracking again on a
  server-side apply), so this costs one request per task, once. Objects written by earlier versions
  are reset on their next write.
- After each write the API server accepted, the store tells its write observers (`observe`): writes
  this store made, not what its watch sees other replicas write.

Every request goes through the API edge (`client.call`), which bounds it and maps API errors; here a
404 becomes `TaskNotFound` and a 409 `VersionConflict`.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import re
import sys
from collections.abc import Callable, Sequence
from datetime import datetime
from http import HTTPStatus
from typing import Any, Final

from kubernetes_asyncio.client import ApiClient, V1DeleteOptions, V1Preconditions
from pydantic import ValidationError

from mcp_tasks.observability import metrics
from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.protocol.models import TaskStatus
from mcp_tasks.store.changes import ChangeFeed
from mcp_tasks.store.kubernetes import client, limits, mapping
from mcp_tasks.store.kubernetes.cache import CacheEntry, expires_at, summary_of
from mcp_tasks.store.kubernetes.resources import GROUP, TASK_PLURAL, VERSION
from mcp_tasks.store.kubernetes.watch import PAGE_SIZE, Reflector, newer_version
from mcp_tasks.store.observers import WriteObservers
from mcp_tasks.tasks import arguments
from mcp_tasks.tasks.errors import StoreUnavailable, TaskNotFound, UnstorableValue, VersionConflict
from mcp_tasks.tasks.interfaces import ArtifactStore, Clock, Unfinished, WriteObserver, Writer, utc_now
from mcp_tasks.tasks.owner import UNKNOWN_ISSUER, Owner, owns
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

EXPIRY_CONCURRENCY: Final = 16
"""DELETE requests in flight at once while expired McpTasks are removed."""


DEFAULT_FULL_OBJECTS: Final = 2048
TOMBSTONES: Final = 10_000
"""How many recent deletions the store remembers (`deleted`), so events about a deleted task cost no GET."""


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
        full_objects: how many finished tasks are also cached whole (the most recently finished or
            read); the others cost one GET per full read. 0: only the latest (the operator reads no results).
        list_page_size: McpTasks per page of the watch's LIST.
        artifacts: where arguments above `inline_arguments_max_bytes` go (`tasks.arguments`); without
            it (the operator, which creates no tasks) arguments stay inline, bounded by `max_object_bytes`.
        inline_arguments_max_bytes: largest argument object kept in the McpTask, in bytes of compact JSON.
    """

    def __init__(
        self,
        api_client: ApiClient,
        namespace: str,
        clock: Clock = utc_now,
        watch_timeout_s: int = 300,
        max_object_bytes: int = limits.DEFAULT_MAX_OBJECT_BYTES,
        request_timeout_s: float = 20.0,
        full_objects: int = DEFAULT_FULL_OBJECTS,
        list_page_size: int = PAGE_SIZE,
        artifacts: ArtifactStore | None = None,
        inline_arguments_max_bytes: int = arguments.DEFAULT_INLINE_ARGUMENTS_MAX_BYTES,
        legacy_issuer: str = UNKNOWN_ISSUER,
    ) -> None:
        self.namespace = namespace
        self.legacy_issuer = legacy_issuer
        """Who vouched for the owners of McpTasks that name no issuer (`tasks.owner.legacy_issuer`): the
        spec is immutable, so they are read as owned through it, never rewritten."""
        self.clock = clock
        self._api = client.Apis(api_client).objects
        self._api_client = api_client
        self._max_object_bytes = max_object_bytes
        self._artifacts = artifacts
        self._inline_arguments_max_bytes = inline_arguments_max_bytes
        self._request_timeout_s = request_timeout_s
        self._cache: dict[str, CacheEntry] = {}
        self._recent: collections.OrderedDict[str, None] = collections.OrderedDict()  # finished, kept whole
        self._deleted: collections.OrderedDict[str, None] = collections.OrderedDict()  # tombstones
        self._full_objects = full_objects
        self._feed = ChangeFeed()
        self._observers = WriteObservers()
        self._listeners: list[Callable[[str], None]] = []
        self.conflicts = 0
        """Compare-and-swap writes that lost to a concurrent writer (observability)."""
        self._may_put_main = True
        """False once the API server refused this store a PUT of the main resource (a status-only writer)."""
        self.reflector = Reflector(
            api_client,
            self,
            plural=TASK_PLURAL,
            namespace=namespace,
            watch_timeout_s=watch_timeout_s,
            page_size=list_page_size,
        )

    async def open(self) -> None:
        """List the namespace's McpTasks and start watching them.

        Raises:
            client.ApiError: the McpTask CRD is not installed (404) or the credentials may not list McpTasks (403).
            StoreUnavailable: the API server did not answer for the reflector's start-up deadline.
        """
        await self.reflector.start()

    async def aclose(self) -> None:
        """Stop watching (the API client belongs to the caller)."""
        await self.reflector.aclose()

    # -- cache -----------------------------------------------------------------------------------

    def listed_page(self, items: Sequence[JsonObject]) -> None:
        for item in items:
            self._remember(item, notify=False)

    def listed(self, names: set[str]) -> None:
        gone = [name for name in self._cache if name not in names]
        for name in gone:
            self._forget(name)
        self._notify([*names, *gone], created=True)

    def apply_event(self, kind: str, obj: JsonObject) -> None:
        name = str(obj["metadata"]["name"])
        if kind == "DELETED":
            self._forget(name)
            self._notify([name])
            return
        self._remember(obj, notify=True, created=kind == "ADDED")

    def _forget(self, name: str) -> None:
        self._cache.pop(name, None)
        self._recent.pop(name, None)
        self._deleted[name] = None
        while len(self._deleted) > TOMBSTONES:
            self._deleted.popitem(last=False)

    def deleted(self, task_id: str) -> bool:
        """Tell whether this store saw McpTask `task_id` deleted (its watch, or its own expiry), lately.

        Task ids are not reused (random, or derived from a session nonce), and an object created again under a
        deleted name clears its tombstone; the answer needs no request. `False` says nothing (never seen, or
        seen too long ago: the last `TOMBSTONES` deletions are remembered).
        """
        return task_id in self._deleted

    def _remember(self, obj: JsonObject, *, notify: bool, created: bool = False) -> CacheEntry:
        """Cache `obj` (unless the cache holds a newer version) and return its entry, kept whole."""
        name = str(obj["metadata"]["name"])
        version = str(obj["metadata"]["resourceVersion"])
        if created:  # a new object under a name deleted before is not that deleted task
            self._deleted.pop(name, None)
        current = self._cache.get(name)
        if current is not None and (current.version == version or not newer_version(version, current.version)):
            if current.obj is None and current.version == version:
                current.obj = obj  # a full read of a summarized task: keep it whole while recent
                obj["metadata"].pop("managedFields", None)
                self._touch(name)
            return current
        tracked = bool(obj["metadata"].pop("managedFields", None))  # written by the API server, read by nobody here
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        owner = spec.get("owner") or {}
        finished = str(status.get("taskStatus") or TaskStatus.WORKING.value) not in _UNFINISHED
        tenant, subject = sys.intern(str(owner.get("tenant"))), sys.intern(str(owner.get("subject")))
        issuer = sys.intern(str(owner.get("issuer") or self.legacy_issuer))
        entry = CacheEntry(version, tenant, subject, issuer, finished, expires_at(obj), obj=obj, tracked=tracked)
        if finished:
            entry.summary = summary_of(obj)
        self._cache[name] = entry
        if finished:
            self._touch(name)
        else:
            self._recent.pop(name, None)
        if notify:
            self._notify([name], created=created)
        return entry

    def _touch(self, name: str) -> None:
        """Mark finished task `name` as recently used; beyond `full_objects`, the oldest keeps only its summary."""
        self._recent[name] = None
        self._recent.move_to_end(name)
        while len(self._recent) > max(1, self._full_objects):  # the latest stays whole: its writer decodes it
            oldest, _ = self._recent.popitem(last=False)
            entry = self._cache.get(oldest)
            if entry is not None and entry.finished:
                entry.obj, entry.parsed = None, None

    def add_change_listener(self, listener: Callable[[str], None]) -> Callable[[], None]:
        """Call `listener(task_id)` for every McpTask this store sees change (watch events, its own
        writes, deletions, relists); it must not block. Returns a function that removes it.
        """
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def observe(self, observer: WriteObserver) -> Callable[[], None]:
        """Call `observer(before, after)` after each write of this store the API server accepted
        (`TaskStore.observe`); returns its remover. Other replicas' writes, seen by the watch, are not told.
        """
        return self._observers.add(observer)

    def _notify(self, names: Sequence[str], created: bool = False) -> None:
        self._feed.changed(names)
        for listener in self._listeners:
            for name in names:
                listener(name)
        if created:
            self._feed.created()

    def _decode(self, entry: CacheEntry) -> TaskRecord:
        """The record of a cached object (`_parse`).

        Raises:
            TaskNotFound: the object is not a well-formed McpTask (edited by hand?); it is logged.
        """
        return self._parse(entry).record

    def _parse(self, entry: CacheEntry) -> mapping.Parsed:
        """A cached object parsed, once per resourceVersion while it is kept whole (a summary is parsed
        each time: it lacks arguments, answers and result).

        Raises:
            TaskNotFound: the object is not a well-formed McpTask (edited by hand?); it is logged.
        """
        if entry.parsed is not None:
            return entry.parsed
        obj = entry.view()
        try:
            parsed = mapping.parse(obj, self.legacy_issuer)
        except (ValidationError, KeyError, ValueError) as exc:
            name = obj.get("metadata", {}).get("name")
            logger.warning("McpTask %s/%s is malformed (%s); treating it as missing", self.namespace, name, exc)
            raise TaskNotFound(str(name)) from exc
        if entry.obj is not None:
            entry.parsed = parsed
        return parsed

    # -- TaskStore -------------------------------------------------------------------------------

    async def create(self, record: TaskRecord) -> TaskRecord:
        """POST the McpTask; return once the API server answered 201 (with its `resourceVersion`).

        Arguments above `inline_arguments_max_bytes` are first written as the task's artifact and the
        McpTask carries `spec.argumentsRef` instead (`tasks.arguments.split`); the record returned then
        has empty `arguments` and its `arguments_ref`. When the API server refuses the McpTask for
        certain (an error answer other than 409), that artifact is deleted again.

        Raises:
            VersionConflict: an McpTask of this name already exists.
            UnstorableValue: the McpTask would exceed `max_object_bytes` (answers too large), an
                inline argument or answer holds an integer beyond 64 bits, or the API server refused
                the object as invalid (422: its schema, or an admission policy; the message is its own).
            client.ApiError: any other refusal (e.g. 403: the gateway's account may not create McpTasks).
            StoreUnavailable: the API server or the artifact store cannot take the task now.
        """
        data: bytes | None = None
        if self._artifacts is not None:
            record, data = arguments.split(record, self._inline_arguments_max_bytes)
        body = mapping.new_object(record, self.namespace)
        limits.check_object(body, record.task_id, "spec", self._max_object_bytes)
        if data is not None and record.arguments_ref is not None and self._artifacts is not None:
            try:
                await self._artifacts.put(
                    record.task_id, record.arguments_ref.name, data, arguments.ARGUMENTS_ARTIFACT_MIME
                )
            except ValueError as exc:  # above the artifact store's own limit
                raise UnstorableValue(f"the task's arguments are too large to keep: {exc}") from exc
            except OSError as exc:
                raise StoreUnavailable(f"the artifact store cannot keep the task's arguments: {exc}") from exc
        try:
            created = await self._request(
                self._api.create_namespaced_custom_object, GROUP, VERSION, self.namespace, TASK_PLURAL, body
            )
        except client.Conflict as exc:
            raise VersionConflict(f"task {record.task_id} already exists") from exc
        except client.ApiError as exc:
            if data is not None:  # refused for certain (not a timeout: the McpTask may exist then)
                await self._drop_orphaned_arguments(record.task_id)
            if isinstance(exc, client.Invalid):  # the CRD's schema or an admission policy (reason Invalid)
                raise UnstorableValue(f"the cluster refused the task: {exc.message or exc}") from exc
            raise
        stored = self._decode(self._remember(created, notify=True, created=True))
        self._observers.notify(None, stored)
        return stored

    async def _drop_orphaned_arguments(self, task_id: str) -> None:
        """Delete the arguments artifact of a task the API server refused to create (nothing else would).

        Only after a definite refusal (an error answer other than 409): after a timeout or a 5xx the
        McpTask may exist, and a conflict means another task holds the id, so their artifacts stay.
        Best effort: a failure is logged, never raised over the create's own error.
        """
        if self._artifacts is None:
            return
        try:
            await self._artifacts.delete_task(task_id)
        except OSError as exc:
            logger.warning("could not delete the arguments of refused task %s: %s", task_id, exc)

    async def get(
        self, task_id: str, owner: Owner | None = None, *, fresh: bool = False, summary: bool = False
    ) -> TaskRecord:
        """Read from the cache, or from the API server on a miss or when `fresh`; foreign, expired and
        missing look alike.

        Alike in timing too: an unknown id costs an authoritative GET (a cache miss must not answer "not
        found" by itself), so a cached task of another owner costs one as well before it is refused.
        A finished task kept only as a summary costs a GET too, unless `summary` says the caller needs
        no arguments, answers or result (they are then empty).

        Raises:
            TaskNotFound: no such McpTask, another owner's, or expired.
        """
        entry = await self._fetch(task_id) if fresh else self._cache.get(task_id)
        if entry is None or (entry.obj is None and not summary) or not _owned_by(entry, owner):
            # a foreign task costs what an unknown id costs: one authoritative read, and it is never decoded
            entry = await self._fetch(task_id)
        if entry is None or not _owned_by(entry, owner):
            raise TaskNotFound(task_id)
        if entry.finished and entry.obj is not None:
            self._touch(task_id)
        record = self._decode(entry)
        if owner is not None and (not owns(record.owner, owner) or record.is_expired(self.clock())):
            raise TaskNotFound(task_id)
        return record

    async def raw(self, task_id: str) -> JsonObject | None:
        """The McpTask object (cache, else GET), or `None`; for owner references and Events. A finished
        task's may be its summary (metadata, spec and status without arguments, answers or result).
        """
        entry = self._cache.get(task_id) or await self._fetch(task_id)
        return None if entry is None else entry.view()

    async def _fetch(self, task_id: str) -> CacheEntry | None:
        """Authoritative GET (a quorum read of etcd); refreshes the cache."""
        if not _valid_name(task_id):
            return None
        try:
            obj = await self._request(
                self._api.get_namespaced_custom_object, GROUP, VERSION, self.namespace, TASK_PLURAL, task_id
            )
        except client.NotFound:
            return None
        return self._remember(obj, notify=False)

    async def compare_and_swap(self, record: TaskRecord, writer: Writer) -> TaskRecord:
        """Write `record` if the McpTask is still at `record.version`; return it at the new version.

        The change is planned against the object as parsed when it was cached (`mapping.plan_write`);
        once the API server accepted it, the observers hear `(the record at record.version, the record written)`.

        Raises:
            VersionConflict: the McpTask changed since `record` was read (409, or the cache is already newer).
            TaskNotFound: the McpTask is gone.
            ResultTooLarge: the serialized task exceeds `max_object_bytes`.
        """
        entry = self._cache.get(record.task_id)
        if entry is None or entry.obj is None:
            entry = await self._fetch(record.task_id)
        if entry is None or entry.obj is None:
            raise TaskNotFound(record.task_id)
        if entry.version != record.version:
            self.conflicts += 1
            metrics.STORE_CONFLICTS.labels("kubernetes").inc()
            await self._fetch(record.task_id)
            raise VersionConflict(f"task {record.task_id} changed since resourceVersion {record.version}")
        current = self._parse(entry)
        plan = mapping.plan_write(current, record, writer)
        obj = entry.obj
        reset = entry.tracked
        if plan.spec is not None:
            obj = await self._put(record, {**_untracked(obj, reset), "spec": mapping.dump(plan.spec)}, status=False)
            reset = False
        if plan.status is not None:
            if reset and self._may_put_main:  # the status subresource cannot reset field ownership: one PUT, once
                try:
                    obj = await self._put(record, _untracked(obj, True), status=False)
                except client.ApiError as exc:
                    if exc.status != HTTPStatus.FORBIDDEN:
                        raise
                    # An operator without `update` on mcptasks (the chart without its admission policy) writes
                    # only the status subresource: the ownership stays for the gateway's next spec write to reset.
                    self._may_put_main = False
            obj = await self._put(record, {**obj, "status": mapping.dump(plan.status)}, status=True)
        written = self._decode(self._remember(obj, notify=True))
        self._observers.notify(current.record, written)
        return written

    async def _put(self, record: TaskRecord, body: JsonObject, *, status: bool) -> JsonObject:
        limits.check_object(body, record.task_id, "status" if status else "spec", self._max_object_bytes)
        call = (
            self._api.replace_namespaced_custom_object_status if status else self._api.replace_namespaced_custom_object
        )
        try:
            result: JsonObject = await self._request(
                call, GROUP, VERSION, self.namespace, TASK_PLURAL, record.task_id, body
            )
        except client.Conflict as exc:
            self.conflicts += 1
            metrics.STORE_CONFLICTS.labels("kubernetes").inc()
            await self._fetch(record.task_id)
            raise VersionConflict(f"task {record.task_id} changed since resourceVersion {record.version}") from exc
        except client.NotFound as exc:
            raise TaskNotFound(record.task_id) from exc
        return result

    async def _request(self, fn: client.ApiMethod, *args: Any, **kwargs: Any) -> Any:
        """One API request through the edge, bounded by `request_timeout_s` and timed by operation.

        Raises:
            StoreUnavailable: no answer in time, no connection, or a 429/5xx answer.
            client.ApiError: any other error answer (the caller decides what 404/409 mean).
        """
        done = metrics.timed("kubernetes", _OPERATIONS.get(getattr(fn, "__name__", ""), "other"))
        try:
            return await client.call(fn, *args, timeout_s=self._request_timeout_s, **kwargs)
        finally:
            done()

    async def unfinished(self) -> Unfinished:
        """Non-terminal McpTasks by `status.taskStatus`, and the oldest `spec.createdAt`, from the cache
        (objects are not decoded).
        """
        counts: dict[str, int] = {}
        oldest: str | None = None
        for entry in list(self._cache.values()):
            if entry.finished or entry.obj is None:
                continue
            status = str((entry.obj.get("status") or {}).get("taskStatus") or TaskStatus.WORKING.value)
            counts[status] = counts.get(status, 0) + 1
            created = str((entry.obj.get("spec") or {}).get("createdAt") or "")
            if created and (oldest is None or created < oldest):  # RFC 3339 UTC strings sort as times
                oldest = created
        return Unfinished(counts, None if oldest is None else datetime.fromisoformat(oldest.replace("Z", "+00:00")))

    def unfinished_ids(self) -> list[str]:
        """Ids of the non-terminal McpTasks in the cache (objects are not decoded)."""
        return [name for name, entry in list(self._cache.items()) if not entry.finished]

    def unfinished_records(self) -> list[TaskRecord]:
        """Every non-terminal McpTask of the cache, decoded (a parse is kept per resourceVersion, so asking
        again costs a walk of the cache, no request); malformed objects are skipped. Any order.
        """
        records: list[TaskRecord] = []
        for name in self.unfinished_ids():
            entry = self._cache.get(name)
            if entry is None:
                continue
            try:
                records.append(self._decode(entry))
            except TaskNotFound:
                continue
        return records

    async def unfinished_of(self, owner: Owner, at_most: int) -> int:
        """The non-terminal McpTasks of `owner` in the cache, counted up to `at_most` (`UnfinishedCount`).

        From the watch cache, no request: this replica's own creates are in it at once (`create` remembers
        what the API server answered), another replica's after its watch event (milliseconds), so replicas
        racing at a principal's last free place may pass by one each, as with the embedded store.
        """
        held = 0
        for name in self.unfinished_ids():
            if held >= at_most:
                break
            entry = self._cache.get(name)
            if entry is not None and Owner(entry.tenant, entry.subject, entry.issuer) == owner:
                held += 1
        return held

    def owner_of(self, task_id: str) -> Owner | None:
        """The owner of McpTask `task_id` as cached (finished or not; nothing is decoded), or `None`."""
        entry = self._cache.get(task_id)
        return None if entry is None else Owner(entry.tenant, entry.subject, entry.issuer)

    async def list_runnable(
        self, now: datetime, limit: int, tools: frozenset[str] | None = None
    ) -> Sequence[TaskRecord]:
        """Non-terminal tasks with no live lease, oldest first (from the cache); with `tools`, only tasks of
        those tools (filtered before anything is decoded: the operator's warm runner asks every second).
        """
        runnable: list[TaskRecord] = []
        if tools is not None and not tools:
            return runnable
        for name in self.unfinished_ids():
            entry = self._cache.get(name)
            if entry is None:
                continue
            if tools is not None and ((entry.obj or {}).get("spec") or {}).get("tool") not in tools:
                continue
            try:
                record = self._decode(entry)
            except TaskNotFound:
                continue
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
        moment = now.timestamp()
        due = [(entry.expires_at, name, entry.version) for name, entry in list(self._cache.items())]
        expired = sorted(item for item in due if item[0] <= moment and self._cache[item[1]].finished)[:limit]
        gate = asyncio.Semaphore(EXPIRY_CONCURRENCY)

        async def delete(name: str, version: str) -> str | None:
            async with gate:
                return await self._delete_expired(name, version)

        deleted = await asyncio.gather(*(delete(name, version) for _, name, version in expired))
        return [task_id for task_id in deleted if task_id is not None]

    async def _delete_expired(self, task_id: str, version: str) -> str | None:
        """Delete one expired McpTask at its version; its id, or `None` when it changed or is gone."""
        try:
            await self._request(
                self._api.delete_namespaced_custom_object,
                GROUP,
                VERSION,
                self.namespace,
                TASK_PLURAL,
                task_id,
                body=V1DeleteOptions(
                    preconditions=V1Preconditions(resource_version=version),
                    propagation_policy="Background",
                ),
            )
        except client.NotFound:
            self._forget(task_id)  # deleted by another replica
            return None
        except client.Conflict:
            return None
        self._forget(task_id)
        self._notify([task_id])
        return task_id

    async def wait_for_change(self, timeout_s: float, task_id: str | None = None) -> None:
        """Wait for a watch event on `task_id` (or any McpTask), or `timeout_s` seconds."""
        await self._feed.wait_for_change(timeout_s, task_id)

    async def wait_for_new_tasks(self, timeout_s: float) -> None:
        """Wait for an McpTask to be added, or `timeout_s` seconds."""
        await self._feed.wait_for_new_tasks(timeout_s)

    def cached_count(self) -> int:
        """McpTasks in the cache (observability and benchmarks)."""
        return len(self._cache)


RESET_MANAGED_FIELDS: Final[tuple[JsonObject, ...]] = ({},)
"""`metadata.managedFields` that tells the API server to drop an object's field ownership (one empty entry)."""


def _owned_by(entry: CacheEntry, owner: Owner | None) -> bool:
    """Whether the cached McpTask belongs to `owner` (any owner when None), from its entry's owner fields."""
    return owner is None or owns(Owner(entry.tenant, entry.subject, entry.issuer), owner)


def _untracked(obj: JsonObject, reset: bool) -> JsonObject:
    """`obj` for a PUT of the main resource; with `reset`, carrying the field-ownership reset."""
    if not reset:
        return obj
    return {**obj, "metadata": {**obj["metadata"], "managedFields": [dict(entry) for entry in RESET_MANAGED_FIELDS]}}


_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def _valid_name(name: str) -> bool:
    """Could `name` be an McpTask name (DNS subdomain)? Avoids a GET for ids that cannot exist."""
    return bool(_DNS_SUBDOMAIN.match(name))
