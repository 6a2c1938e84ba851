"""`ActivePeer`: whether this operator replica is the one kopf's peering lets act.

kopf pauses the watch streams of every replica but the live one with the highest priority (each
replica writes `{identity: {priority, lifetime, lastseen}}` into the `KopfPeering` object's status).
A paused replica receives no Job or pod events, so its copies of them go stale; it must not reconcile
from them. kopf tells handlers nothing about pausing, so this reads the same `KopfPeering` status
(one small GET every `poll_s`) and applies kopf's rule: this replica, known by the priority it gave
kopf, is active when it is listed and no other live peer has a priority as high.

A replica acts only on a confirmation: each poll's GET has `confirm_timeout_s` seconds (through the
API edge, `client.call`); a read that fails or hangs past it counts as "not leading", so a replica
cut off from the API server stops reconciling within that deadline instead of acting on stale copies
(another replica may have taken over meanwhile). It acts again only after the usual take-over wait,
having listed Jobs and pods afresh (`on_activate`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Final, NoReturn

from kubernetes_asyncio.client import ApiClient

from mcp_tasks import aio
from mcp_tasks.store.kubernetes import client
from mcp_tasks.tasks.errors import StoreUnavailable

logger = logging.getLogger("mcp_tasks.operator")

POLL_S: Final = 2.0
"""How often an active replica checks that it still is, in seconds."""
WAITING_POLL_S: Final = 0.5
"""How often a replica that is not active checks whether it has become so, in seconds."""
CONFIRM_TIMEOUT_S: Final = 5.0
"""Longest one leadership check may take, in seconds; a check that takes longer counts as "not leading"."""


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
        confirm_timeout_s: deadline of one read, in seconds; past it (or on any error) the replica
            stops acting until a later read confirms it leads.
        takeover_s: how long a replica must have seen itself leading before it acts, in seconds (so the
            replica that led has had a poll to see that it no longer does).
    """

    def __init__(
        self,
        api: ApiClient,
        namespace: str,
        name: str,
        priority: int,
        on_activate: Callable[[], Awaitable[None]],
        poll_s: float = POLL_S,
        confirm_timeout_s: float = CONFIRM_TIMEOUT_S,
        takeover_s: float = POLL_S,
    ) -> None:
        self._api = client.Apis(api).objects
        self._namespace = namespace
        self._name = name
        self.priority = priority
        self._on_activate = on_activate
        self._poll_s = poll_s
        self._confirm_timeout_s = confirm_timeout_s
        self._takeover_s = takeover_s
        self.active = asyncio.Event()
        """Set while this replica may reconcile."""
        self._leading_since: float | None = None

    async def run(self) -> NoReturn:
        """Check every poll interval until cancelled; a failed check stands down (see the module docstring).

        Raises:
            asyncio.CancelledError: when cancelled (the only way out).
        """
        await aio.every(self._interval_s, self.check, "peering check", log=logger)

    def _interval_s(self) -> float:
        return self._poll_s if self.active.is_set() else min(self._poll_s, WAITING_POLL_S)

    async def check(self) -> None:
        """Read the `KopfPeering` object once (within `confirm_timeout_s`) and set or clear `active`."""
        try:
            peering: Any = await client.call(
                self._api.get_namespaced_custom_object,
                "kopf.dev",
                "v1",
                self._namespace,
                "kopfpeerings",
                self._name,
                timeout_s=self._confirm_timeout_s,
            )
        except (client.ApiError, StoreUnavailable) as exc:
            logger.warning("cannot read KopfPeering %s: %s; retrying", self._name, exc)
            self._stand_down("(its leadership is not confirmed)", {})
            return
        status = peering.get("status") or {}
        now_active = is_active(status, self.priority, datetime.now(UTC))
        moment = asyncio.get_running_loop().time()
        if not now_active:
            peers = {key: info.get("priority") for key, info in status.items() if isinstance(info, dict)}
            why = "in favour of another" if self.priority in peers.values() else "(no longer registered)"
            self._stand_down(why, peers)
        elif not self.active.is_set():
            self._leading_since = self._leading_since if self._leading_since is not None else moment
            if moment - self._leading_since >= self._takeover_s:
                await self._on_activate()
                logger.info("this operator replica is active (peering %s)", self._name)
                self.active.set()

    def _stand_down(self, why: str, peers: dict[str, Any]) -> None:
        """Stop acting (if acting) and restart the take-over wait."""
        self._leading_since = None
        if self.active.is_set():
            logger.info("this operator replica is paused %s (peering %s: %s)", why, self._name, peers)
            self.active.clear()
