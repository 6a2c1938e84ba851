"""`ActivePeer`: whether this operator replica is the one kopf's peering lets act.

kopf pauses the watch streams of every replica but the live one with the highest priority (each
replica writes `{identity: {priority, lifetime, lastseen}}` into the `KopfPeering` object's status).
A paused replica receives no Job or pod events, so its copies of them go stale; it must not reconcile
from them. kopf tells handlers nothing about pausing, so this reads the same `KopfPeering` status
(one small GET every `poll_s`) and applies kopf's rule: this replica, known by the priority it gave
kopf, is active when it is listed and no other live peer has a priority as high.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from kubernetes_asyncio.client import ApiClient, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException

logger = logging.getLogger("mcp_tasks.operator")

POLL_S: Final = 2.0
"""How often an active replica checks that it still is, in seconds."""
WAITING_POLL_S: Final = 0.5
"""How often a replica that is not active checks whether it has become so, in seconds."""


def is_active(status: dict[str, Any], priority: int, now: datetime) -> bool:
    """Tell, by kopf's peering rule over a `KopfPeering` `status`, whether the replica with `priority` is active."""
    mine = False
    for info in status.values():
        if not isinstance(info, dict):
            continue
        peer_priority = int(info.get("priority", 0))
        lastseen = info.get("lastseen")
        try:
            seen = datetime.fromisoformat(str(lastseen)) if lastseen else now
        except ValueError:
            seen = now
        if seen.tzinfo is None:
            seen = seen.replace(tzinfo=UTC)
        alive = seen + timedelta(seconds=int(info.get("lifetime", 60))) > now
        if peer_priority == priority and not mine:
            mine = True
            continue
        if alive and peer_priority >= priority:
            return False
    return mine


class ActivePeer:
    """Tracks `is_active` for this replica; calls `on_activate` each time it becomes active.

    Args:
        api: the operator's API client.
        namespace: where the `KopfPeering` object lives.
        name: its name (`OperatorSettings.peering`).
        priority: the priority this replica gave kopf (`settings.peering.priority`).
        on_activate: awaited when the replica becomes active (before `active` is set), e.g. to list
            Jobs and pods afresh.
        poll_s: how often an active replica reads the object, in seconds (a waiting one: `WAITING_POLL_S`).
    """

    def __init__(
        self,
        api: ApiClient,
        namespace: str,
        name: str,
        priority: int,
        on_activate: Callable[[], Awaitable[None]],
        poll_s: float = POLL_S,
    ) -> None:
        self._api = CustomObjectsApi(api)
        self._namespace = namespace
        self._name = name
        self.priority = priority
        self._on_activate = on_activate
        self._poll_s = poll_s
        self.active = asyncio.Event()
        """Set while this replica may reconcile."""
        self._leading_since: float | None = None

    async def run(self) -> None:
        """Poll forever (cancel to stop); errors keep the last state and are retried."""
        while True:
            try:
                peering: Any = await self._api.get_namespaced_custom_object(
                    "kopf.dev", "v1", self._namespace, "kopfpeerings", self._name
                )
                status = peering.get("status") or {}
                now_active = is_active(status, self.priority, datetime.now(UTC))
                moment = asyncio.get_running_loop().time()
                if not now_active:
                    self._leading_since = None
                    if self.active.is_set():
                        peers = {key: info.get("priority") for key, info in status.items() if isinstance(info, dict)}
                        why = "in favour of another" if self.priority in peers.values() else "(no longer registered)"
                        logger.info("this operator replica is paused %s (peering %s: %s)", why, self._name, peers)
                        self.active.clear()
                elif not self.active.is_set():
                    # Take over only once the replica that led has had a poll to see that it no longer does.
                    self._leading_since = self._leading_since if self._leading_since is not None else moment
                    if moment - self._leading_since >= POLL_S:
                        await self._on_activate()
                        logger.info("this operator replica is active (peering %s)", self._name)
                        self.active.set()
            except asyncio.CancelledError:
                raise
            except (ApiException, OSError, TimeoutError) as exc:
                logger.warning("cannot read KopfPeering %s: %s; retrying", self._name, exc)
            except Exception:
                logger.exception("peering check failed; retrying")
            await asyncio.sleep(self._poll_s if self.active.is_set() else min(self._poll_s, WAITING_POLL_S))
