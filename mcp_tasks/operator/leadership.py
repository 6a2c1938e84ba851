"""`LeaderElection`: which operator replica reconciles, decided by a namespaced `coordination.k8s.io/v1` Lease.

The operator's usual answer, as client-go's `leaderelection` does it: every replica reads the Lease
named `OperatorSettings.leader_lease` in the operator's namespace every `retry_period_s` seconds.

- **Acquire** when the Lease is missing (create it), free (`holderIdentity` empty: a leader released it)
  or expired: its record has not changed for `leaseDurationSeconds` as *this* replica measured it (the
  local monotonic clock from the moment it last saw the record change, so clock skew between
  replicas does not matter). Every change of holder counts one more `leaseTransitions`.
- **Renew** every `retry_period_s` while leading: `renewTime` is rewritten with an optimistic-concurrency
  replace (the `resourceVersion` read), so of two replicas racing for the Lease exactly one wins (409).
- **Step down** (stop acting: `leading` cleared, `mcptasks_operator_leader` 0) as soon as another holder
  is read, or when no renew was confirmed within `renew_deadline_s` of the last one: a replica cut
  off from the API server stops acting before anybody else may take over (`renew_deadline_s <
  lease_duration_s`, checked at start-up). Each renew's request is bounded by what is left of that deadline.
- **Release** on a graceful stop (`release`): the Lease is rewritten with no holder, so a standby takes
  over at its next read instead of waiting out the duration.

Every request goes through the API edge (`client.call_json`). Called by `operator/app.py`, which gates
the reconcile workers, the warm tools, the resync and the expiry sweep on `leading`. It never acts on
tasks itself and never decides anything from a clock other than the two it is given.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Final, Literal, NoReturn

from kubernetes_asyncio.client import ApiClient

from mcp_tasks import aio
from mcp_tasks.observability import metrics
from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.store.kubernetes import client
from mcp_tasks.tasks.errors import StoreUnavailable

logger = logging.getLogger("mcp_tasks.operator")

MIN_REQUEST_S: Final = 0.05
"""Shortest deadline given to one Lease request, in seconds (when the renew deadline is almost spent)."""


@dataclass(frozen=True, slots=True)
class LeaseTiming:
    """How long a Lease lasts and how often it is renewed (client-go's `LeaderElectionConfig` terms).

    Attributes:
        lease_duration_s: `spec.leaseDurationSeconds`: how long standbys wait, after they last saw the
            record change, before they take the Lease over, in whole seconds.
        renew_deadline_s: how long the leader keeps acting without a confirmed renew, in seconds (less
            than `lease_duration_s`).
        retry_period_s: pause between two reads or renews, in seconds (less than `renew_deadline_s`).
    """

    lease_duration_s: int = 15
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """The leader-election fields of a Lease's `spec` (`coordination.k8s.io/v1` `LeaseSpec`).

    Attributes:
        holder: `holderIdentity`; empty when nobody holds it (released, or never held).
        lease_duration_s: `leaseDurationSeconds` (0 when absent).
        acquire_time: `acquireTime`, the MicroTime string as stored (`None` when absent).
        renew_time: `renewTime`, as stored.
        transitions: `leaseTransitions`: how many times the Lease changed hands.
    """

    holder: str
    lease_duration_s: int
    acquire_time: str | None
    renew_time: str | None
    transitions: int

    @classmethod
    def of(cls, lease: JsonObject) -> LeaseRecord:
        """The record of a Lease as the API server answers it (JSON); missing fields read as empty."""
        spec = lease.get("spec") or {}
        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            lease_duration_s=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=spec.get("acquireTime"),
            renew_time=spec.get("renewTime"),
            transitions=int(spec.get("leaseTransitions") or 0),
        )

    def spec(self) -> JsonObject:
        """The record as a Lease `spec` (absent fields left out)."""
        spec: JsonObject = {"leaseDurationSeconds": self.lease_duration_s, "leaseTransitions": self.transitions}
        if self.holder:
            spec["holderIdentity"] = self.holder
        if self.acquire_time is not None:
            spec["acquireTime"] = self.acquire_time
        if self.renew_time is not None:
            spec["renewTime"] = self.renew_time
        return spec


def micro_time(moment: datetime) -> str:
    """`moment` as a Kubernetes `MicroTime` (RFC 3339, microseconds, UTC: `2026-12-02T10:00:00.000000Z`)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def held_until(lease: JsonObject) -> datetime | None:
    """When a Lease's holder's claim runs out by its own record (`renewTime` + `leaseDurationSeconds`, UTC),
    or `None` when nobody holds it. For readers that only look (the gateway): a replica deciding whether to
    take over uses its own observation time instead (see the module docstring).
    """
    record = LeaseRecord.of(lease)
    if not record.holder or record.renew_time is None:
        return None
    renewed = datetime.fromisoformat(record.renew_time)
    if renewed.tzinfo is None:
        renewed = renewed.replace(tzinfo=UTC)
    return renewed + timedelta(seconds=record.lease_duration_s)


Outcome = Literal["held", "other"]
"""What one attempt found: this replica holds the Lease (acquired or renewed), or another valid holder does."""


@dataclass(eq=False)
class LeaderElection:
    """Leader election for one identity over one Lease; `leading` is set while this replica may act.

    Fields:
        api: the operator's API client.
        namespace: where the Lease lives (the operator's namespace).
        name: the Lease's name (`OperatorSettings.leader_lease`).
        identity: this replica's `holderIdentity`, unique per process (host name and a random suffix).
        on_started_leading: awaited after the Lease is won and before `leading` is set (e.g. list Jobs
            and pods afresh); if it raises, the replica does not act and tries again at the next renew.
        timing: lease duration, renew deadline and retry period.
        wall_clock: UTC now, for `acquireTime` and `renewTime` (which only humans and lookers read).
    """

    api: ApiClient
    namespace: str
    name: str
    identity: str
    on_started_leading: Callable[[], Awaitable[None]]
    timing: LeaseTiming
    wall_clock: Callable[[], datetime]
    leading: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    """Set while this replica holds the Lease, has renewed it within the renew deadline, and may act."""
    _observed: LeaseRecord | None = field(default=None, init=False)
    _observed_at: float = field(default=0.0, init=False)
    _renewed_at: float | None = field(default=None, init=False)
    _next_s: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        self._leases = client.Apis(self.api).coordination
        metrics.OPERATOR_LEADER.set(0)

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    async def run(self) -> NoReturn:
        """Try to acquire, then renew, every `retry_period_s` (sooner when the renew deadline is near).

        Raises:
            asyncio.CancelledError: when cancelled (the only way out; call `release` afterwards).
        """
        await aio.every(lambda: self._next_s, self.step, "leader election", log=logger)

    async def step(self) -> None:
        """One read (and write) of the Lease; sets or clears `leading`, and when to step next."""
        started = self._now()
        leading = self.leading.is_set()
        deadline = (self._renewed_at or started) + self.timing.renew_deadline_s
        timeout_s = max(deadline - started, MIN_REQUEST_S) if leading else self.timing.renew_deadline_s
        self._next_s = self.timing.retry_period_s
        try:
            outcome = await self._try_acquire_or_renew(timeout_s)
        except (client.ApiError, StoreUnavailable) as exc:
            if not leading:
                logger.debug("leader lease %s: cannot read or write it: %s", self.name, exc)
                return
            if self._now() >= deadline:
                self._step_down(f"no renew confirmed within {self.timing.renew_deadline_s:g}s ({exc})")
            else:
                logger.warning("leader lease %s: renew failed (%s); retrying until the renew deadline", self.name, exc)
                self._next_s = min(self.timing.retry_period_s, max(deadline - self._now(), 0.0))
            return
        if outcome == "other":
            self._renewed_at = None
            if leading:
                self._step_down(f"another replica holds it ({self._observed.holder if self._observed else '?'})")
            return
        self._renewed_at = started  # counted from before the request: never later than the server's renewTime
        if not leading:
            await self.on_started_leading()
            self.leading.set()
            metrics.OPERATOR_LEADER.set(1)
            logger.info("this operator replica leads (lease %s, holder %s)", self.name, self.identity)

    async def _try_acquire_or_renew(self, timeout_s: float) -> Outcome:
        """Read the Lease, then create it, take it over or renew it when this replica may.

        Raises:
            client.ApiError: refused (403: RBAC; 409: another replica wrote first).
            StoreUnavailable: no answer within `timeout_s`.
        """
        now = micro_time(self.wall_clock())
        try:
            lease = await client.call_json(
                self._leases.read_namespaced_lease, self.name, self.namespace, timeout_s=timeout_s
            )
        except client.NotFound:
            mine = LeaseRecord(self.identity, self.timing.lease_duration_s, now, now, 0)
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": self.name}}
            created = await client.call_json(
                self._leases.create_namespaced_lease,
                self.namespace,
                {**body, "spec": mine.spec()},
                timeout_s=timeout_s,
            )
            self._observe(LeaseRecord.of(created))
            return "held"
        record = LeaseRecord.of(lease)
        self._observe(record)
        if record.holder and record.holder != self.identity and not self._expired(record):
            return "other"
        ours = record.holder == self.identity
        mine = LeaseRecord(
            holder=self.identity,
            lease_duration_s=self.timing.lease_duration_s,
            acquire_time=record.acquire_time if ours else now,
            renew_time=now,
            transitions=record.transitions if ours else record.transitions + 1,
        )
        replaced = await client.call_json(
            self._leases.replace_namespaced_lease,
            self.name,
            self.namespace,
            {**lease, "spec": {**(lease.get("spec") or {}), **mine.spec()}},  # metadata keeps resourceVersion
            timeout_s=timeout_s,
        )
        self._observe(LeaseRecord.of(replaced))
        return "held"

    def _observe(self, record: LeaseRecord) -> None:
        if record != self._observed:
            self._observed = record
            self._observed_at = self._now()

    def _expired(self, record: LeaseRecord) -> bool:
        """Whether `record` has stayed unchanged for its duration, as this replica measured it."""
        return self._now() >= self._observed_at + max(record.lease_duration_s, 1)

    def _step_down(self, why: str) -> None:
        self.leading.clear()
        metrics.OPERATOR_LEADER.set(0)
        logger.warning("this operator replica stops acting: leader lease %s: %s", self.name, why)

    async def release(self, timeout_s: float = 5.0) -> None:
        """Give the Lease up if it names this replica (graceful stop), so a standby takes over at once.

        Call it after everything that acts on `leading` has stopped. It reads the Lease even when this
        replica is not acting right now: one that stepped down after a slow renew may still be named in
        it. Best effort: a failure is logged (a standby then takes over when the Lease expires).
        """
        self.leading.clear()
        metrics.OPERATOR_LEADER.set(0)
        if self._observed is None or self._observed.holder != self.identity:
            return  # it never named us: nothing to give up (and no request on a standby's way out)
        try:
            lease = await client.call_json(
                self._leases.read_namespaced_lease, self.name, self.namespace, timeout_s=timeout_s
            )
            record = LeaseRecord.of(lease)
            if record.holder != self.identity:
                return
            now = micro_time(self.wall_clock())
            freed = LeaseRecord("", 1, now, now, record.transitions)
            await client.call_json(
                self._leases.replace_namespaced_lease,
                self.name,
                self.namespace,
                {**lease, "spec": freed.spec()},
                timeout_s=timeout_s,
            )
            logger.info("released leader lease %s", self.name)
        except (client.ApiError, StoreUnavailable) as exc:
            logger.warning(
                "could not release leader lease %s (%s); a standby takes over when it expires", self.name, exc
            )
