"""`Reflector`: a list-then-watch loop that keeps a local copy of one resource collection current.

The pattern of client-go's reflector, for custom resources: LIST to get a consistent snapshot and its
`resourceVersion` (in pages of `page_size` objects, as client-go does, so the memory a listing takes is
one page, not the whole collection), then WATCH from there with bookmarks. When the server closes the watch (its
`timeoutSeconds`, a restart, a proxy), the loop resumes from the last `resourceVersion` it saw, so
no event is lost; when that version is too old (`410 Gone`), it lists again and replaces the copy.
Transient errors back off exponentially (0.2 s doubling to 5 s). Every request goes through the API edge
(`client`): each LIST page is bounded by `request_timeout_s`, each WATCH by its server-side
`timeoutSeconds` and a read timeout (and, on a connection that went silent, the API client's TCP
keepalive: `client.open_api_client`).

`not_ready_reason()` is what a readiness probe asks: the copy was listed once and the loop runs, and the
loop has not gone `unreachable_after_s` seconds without an open WATCH or a completed LIST (the API server
is then unreachable and the copy may be stale). It reads only local state: a probe costs no API request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Final, Protocol

from kubernetes_asyncio.client import ApiClient

from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.store.kubernetes import client
from mcp_tasks.store.kubernetes.resources import GROUP, VERSION
from mcp_tasks.tasks.errors import StoreUnavailable

logger = logging.getLogger("mcp_tasks.store.kubernetes")

BACKOFF_INITIAL_S: Final = 0.2
BACKOFF_MAX_S: Final = 5.0

PAGE_SIZE: Final = 500

UNREACHABLE_AFTER_S: Final = 5.0
"""How long the loop may go without an open WATCH or a completed LIST before `Reflector.not_ready_reason`
reports the API server unreachable, in seconds. Long enough to ride out a reconnection's backoff after
the server ends a WATCH (milliseconds) or restarts (a second or two), short enough that a kubelet takes a
replica that lost the API server out of its Service within its probe period. Ready again as soon as a
WATCH is open or a LIST completes."""


class ReflectorSink(Protocol):
    """What a `Reflector` feeds: a local copy of the collection (the task store's cache, the tool catalog).

    Each method may return an awaitable, which the reflector awaits before the next delivery.
    """

    def listed_page(self, items: Sequence[JsonObject]) -> Awaitable[None] | None:
        """Receive one page of a LIST (initial sync and after `410 Gone`), in order."""

    def listed(self, names: set[str]) -> Awaitable[None] | None:
        """Receive, after a LIST's last page, the names of every listed object: any other is gone."""

    def apply_event(self, kind: str, obj: JsonObject) -> Awaitable[None] | None:
        """Receive (`ADDED`|`MODIFIED`|`DELETED`, object) for each watch event, in server order."""


def newer_version(candidate: str, current: str) -> bool:
    """Tell whether resourceVersion `candidate` is at least as new as `current`.

    resourceVersions are opaque, but every etcd-backed API server issues increasing integers; when
    both parse, compare them so a late watch event never rolls back a newer copy.
    """
    if candidate.isdigit() and current.isdigit():
        return int(candidate) >= int(current)
    return True


async def list_pages(
    fn: client.ApiMethod,
    *args: Any,
    page_size: int = PAGE_SIZE,
    timeout_s: float = client.DEFAULT_TIMEOUT_S,
    **kwargs: Any,
) -> AsyncIterator[JsonObject]:
    """Yield each page (the raw JSON body) of one consistent LIST made with `fn(*args, **kwargs)`, a
    list method of `client.Apis`; `continue` tokens keep the first page's snapshot.

    Args:
        fn: the list method.
        *args: its positional arguments.
        page_size: objects per page (`limit`).
        timeout_s: deadline of each page's request, in seconds.
        **kwargs: its keyword arguments (e.g. `label_selector`).

    Raises:
        client.Gone: the snapshot expired between pages (410); list again from the start.
        client.ApiError: any other error answer.
        StoreUnavailable: a page did not come within `timeout_s`, or a 429/5xx answer.
    """
    token: str | None = None
    while True:
        extra = {"_continue": token} if token else {}
        page = await client.call_json(fn, *args, limit=page_size, timeout_s=timeout_s, **extra, **kwargs)
        yield page
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return


class Reflector:
    """Keep `on_replace`/`on_event` fed with one namespaced custom-resource collection.

    Args:
        api_client: an open kubernetes_asyncio `ApiClient`.
        plural, namespace: the collection to watch.
        group, version: its API (default this project's, `resources.API_VERSION`).
        sink: what receives each LIST page, the names after a LIST, and each watch event.
        watch_timeout_s: server-side `timeoutSeconds` of one WATCH request, in seconds (default 5 min);
            the loop then resumes from the last seen `resourceVersion`.
        label_selector: optional label selector for the LIST and WATCH.
        page_size: objects per LIST page (`limit`).
        unreachable_after_s: how long without an open WATCH or a completed LIST makes the collection
            unready, in seconds (default `UNREACHABLE_AFTER_S`).
    """

    def __init__(
        self,
        api_client: ApiClient,
        sink: ReflectorSink,
        *,
        plural: str,
        namespace: str,
        group: str = GROUP,
        version: str = VERSION,
        watch_timeout_s: int = 300,
        label_selector: str | None = None,
        page_size: int = PAGE_SIZE,
        unreachable_after_s: float = UNREACHABLE_AFTER_S,
    ) -> None:
        self._api = client.Apis(api_client).objects
        self._coordinates = (group, version, namespace, plural)
        self._sink = sink
        self._page_size = page_size
        self._watch_timeout_s = watch_timeout_s
        self._label_selector = label_selector
        self._resource_version: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._unreachable_after_s = unreachable_after_s
        self._lost_since: float | None = None
        """Loop time (s) since which no WATCH has been open and no LIST completed; None while one is."""
        self.synced = asyncio.Event()
        """Set once the first LIST has been delivered."""
        self.watches_started = 0
        """How many WATCH requests were opened (observability and tests)."""
        self.relists = 0
        """How many times the collection was listed again after `410 Gone`."""

    @property
    def ready(self) -> bool:
        """True when `not_ready_reason()` is None."""
        return self.not_ready_reason() is None

    def not_ready_reason(self) -> str | None:
        """Why the local copy cannot be trusted now, in a short sentence for a readiness probe; None when it can.

        Not ready: before the first LIST was delivered, once the loop stopped, and while the loop has gone
        more than `unreachable_after_s` seconds without an open WATCH or a completed LIST (the API server
        is unreachable: refused, black-holed, or answering errors). Local state only: no API request.
        """
        plural = self._coordinates[3]
        if not self.synced.is_set() or self._task is None or self._task.done():
            return f"{plural} not listed and watched yet"
        lost_for_s = self.lost_for_s
        if lost_for_s > self._unreachable_after_s:
            return f"API server unreachable: no watch of {plural} for {lost_for_s:.0f} s"
        return None

    @property
    def lost_for_s(self) -> float:
        """How long, in seconds, the loop has gone without an open WATCH or a completed LIST (0.0 while one is)."""
        if self._lost_since is None:
            return 0.0
        return asyncio.get_running_loop().time() - self._lost_since

    def _mark_lost(self) -> None:
        if self._lost_since is None:
            self._lost_since = asyncio.get_running_loop().time()

    @property
    def resource_version(self) -> str | None:
        """The last `resourceVersion` seen (from a LIST, an event or a bookmark)."""
        return self._resource_version

    def resume_from(self, resource_version: str) -> None:
        """Make the next WATCH start at `resource_version` (recovery drills and tests of the `410 Gone` path)."""
        self._resource_version = resource_version

    async def start(self, timeout_s: float = 60.0) -> None:
        """Start the loop once the first LIST has been delivered.

        Transient answers (429, 5xx, connection errors: an API server still starting) are retried with
        backoff for up to `timeout_s` seconds; configuration errors fail at once.

        Raises:
            client.ApiError: the first LIST failed for good (404: CRD not installed; 401/403: credentials or RBAC).
            StoreUnavailable: the API server did not answer for `timeout_s` seconds.
        """
        deadline = asyncio.get_running_loop().time() + timeout_s
        delay = BACKOFF_INITIAL_S
        while True:
            try:
                await self._list()
                break
            except (StoreUnavailable, client.Gone) as exc:  # 410: the pages' snapshot expired
                if asyncio.get_running_loop().time() + delay > deadline:
                    raise
                logger.info("%s list failed (%s); the API server may be starting, retrying", self._coordinates[3], exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, BACKOFF_MAX_S)
        self._task = asyncio.create_task(self._run(), name=f"reflector-{self._coordinates[3]}")

    async def aclose(self) -> None:
        """Stop watching."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _list(self) -> None:
        """One consistent listing, page by page (`continue` tokens keep the first page's snapshot).

        Raises:
            client.Gone: the snapshot expired between pages (410); the caller lists again.
            client.ApiError: any other error answer.
            StoreUnavailable: no answer in time, or a 429/5xx answer.
        """
        group, version, namespace, plural = self._coordinates
        names: set[str] = set()
        listed_at: str | None = None
        kwargs: dict[str, Any] = {"label_selector": self._label_selector} if self._label_selector else {}
        call = self._api.list_namespaced_custom_object
        async for page in list_pages(call, group, version, namespace, plural, page_size=self._page_size, **kwargs):
            items = page.get("items") or []
            names.update(str(item["metadata"]["name"]) for item in items)
            await _call(self._sink.listed_page, items)
            listed_at = (page.get("metadata") or {}).get("resourceVersion")  # the last page's is the listing's
        self._resource_version = listed_at
        await _call(self._sink.listed, names)
        self._lost_since = None
        self.synced.set()

    async def _run(self) -> None:
        delay = BACKOFF_INITIAL_S
        while True:
            self._mark_lost()  # until the WATCH below is open
            try:
                await self._watch_once()
                delay = BACKOFF_INITIAL_S
            except asyncio.CancelledError:
                raise
            except client.Gone:
                self._mark_lost()
                logger.info(
                    "%s watch expired at resourceVersion %s; listing again",
                    self._coordinates[3],
                    self._resource_version,
                )
                await self._relist(delay)
                self.relists += 1
            except Exception as exc:  # the loop must survive any transient failure
                self._mark_lost()
                logger.warning("%s watch failed (%s); retrying in %.1f s", self._coordinates[3], exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, BACKOFF_MAX_S)

    async def _relist(self, delay: float) -> None:
        while True:
            try:
                await self._list()
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.warning("%s list failed (%s); retrying in %.1f s", self._coordinates[3], exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, BACKOFF_MAX_S)

    async def _watch_once(self) -> None:
        """One WATCH from the last seen `resourceVersion`, until the server ends it.

        Raises:
            client.Gone: that `resourceVersion` is too old (410); list again.
            client.ApiError, StoreUnavailable: any other failure (see `client.watch`).
        """
        group, version, namespace, plural = self._coordinates
        kwargs: dict[str, Any] = {"allow_watch_bookmarks": True, "resource_version": self._resource_version}
        if self._label_selector:
            kwargs["label_selector"] = self._label_selector
        call = self._api.list_namespaced_custom_object
        async with client.watch(
            call, group, version, namespace, plural, server_timeout_s=self._watch_timeout_s, **kwargs
        ) as events:
            self._lost_since = None
            self.watches_started += 1
            async for event in events:
                await self._handle(event)

    async def _handle(self, event: JsonObject) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        resource_version = (obj.get("metadata") or {}).get("resourceVersion")
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            await _call(self._sink.apply_event, str(kind), obj)
        if resource_version:
            self._resource_version = resource_version


async def _call(callback: Callable[..., Awaitable[None] | None], *args: Any) -> None:
    outcome = callback(*args)
    if outcome is not None:
        await outcome
