"""`LimitSettings`: how much of an installation one tenant and one principal may use (group `limits` of the
settings tree), with per-tenant overrides. Values and their parsing only: no I/O, no clock.

Read by every side that enforces a limit, so each limit has one source: the gateway (the unfinished-task
quota and the task-creation rates, before anything is stored), the embedded runner's claim path and the
operator's admission (the running budgets, through `tasks.fair_share`). The global cap of an executor stays
the executor's own setting (`MCPTASKS_MAX_CONCURRENT_TASKS` for the embedded runner).

A limit of `0` is "no limit". Every default is off except the weight (1): an installation that sets nothing
keeps its behaviour, except that a slot freed while tasks wait goes to the tenant furthest below its share
(`tasks.fair_share.pick`), which costs nothing and needs no setting.

Per-tenant overrides (`MCPTASKS_TENANT_LIMITS`, Helm `limits.tenants`) are one JSON object, tenant name →
object of the overridable field names below and their values, e.g.
`{"team-a": {"max_running_per_tenant": 8, "weight": 2}, "batch": {"max_unfinished_per_principal": 5000}}`.
A field not named keeps the installation-wide value; an unknown tenant gets the installation-wide values.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Final

from mcp_tasks.tasks.frozen_mapping import FrozenJsonMapping

OVERRIDABLE: Final = (
    "max_running_per_tenant",
    "max_running_per_principal",
    "max_unfinished_per_principal",
    "weight",
    "task_create_rate_per_principal",
    "task_create_burst_per_principal",
    "task_create_rate_per_tenant",
    "task_create_burst_per_tenant",
)
"""The fields a per-tenant override may set (the same names as `LimitSettings`' and `TenantLimits`')."""

MAX_COUNT: Final = 2**63 - 1
"""The largest value of an integer limit: SQLite's (a quota is bound as `LIMIT ?`, a 64-bit integer)."""

WEIGHT_RANGE: Final = (0.001, 1000.0)
"""The smallest and largest tenant weight: a million-fold spread between tenants is already more than
any sharing needs, and outside it `running / weight` loses its meaning (a subnormal weight divides to
infinity)."""


def value_problem(name: str, value: object, kind: str) -> str | None:
    """What is wrong with `value` as the limit `name` of type `kind` (`"int"` or `"float"`), or `None`.

    Numbers only (not booleans), finite, >= 0; integers whole and at most `MAX_COUNT`; a weight within
    `WEIGHT_RANGE`. The text completes "`name` must be …", e.g. "a finite number >= 0, got nan".
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"a number, got {value!r}"
    if not math.isfinite(value):
        return f"a finite number, got {value!r}"
    if name == "weight":
        low, high = WEIGHT_RANGE
        return None if low <= value <= high else f"between {low:g} and {high:g}, got {value!r}"
    if value < 0:
        return f"a number >= 0, got {value!r}"
    if kind == "int" and value != int(value):
        return f"a whole number, got {value!r}"
    if kind == "int" and value > MAX_COUNT:
        return f"at most {MAX_COUNT} (SQLite's largest integer), got {value!r}"
    return None


def _finite_float(text: str) -> float:
    """`json.loads`' `parse_float`: a JSON number beyond float range is refused as written, not as `inf`."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is beyond the range of a number")
    return value


def _no_constant(text: str) -> float:
    """`json.loads`' `parse_constant`: `NaN`, `Infinity` and `-Infinity` are not JSON, nor limits."""
    raise ValueError(f"{text} is not a number")


@dataclass(frozen=True, slots=True)
class TenantLimits:
    """The limits one tenant's tasks and principals are held to: the installation's, with its override applied.

    Attributes:
        max_running_per_tenant: task runs of the tenant at once across its principals (tasks claimed or
            admitted, and synchronous calls running); 0: no limit.
        max_running_per_principal: task runs of one principal of the tenant at once; 0: no limit.
        max_unfinished_per_principal: unfinished tasks (`working` or `input_required`, queued or running) one
            principal may hold; a `tools/call` that would create one more is refused; 0: no limit.
        weight: the tenant's share of the slots relative to other tenants' (default 1; 2 gets twice the
            slots of a tenant of weight 1 while both have tasks waiting).
        task_create_rate_per_principal: tasks one principal may create per second, sustained (a token
            bucket); 0: no limit.
        task_create_burst_per_principal: tasks one principal may create at once before the rate applies.
        task_create_rate_per_tenant: tasks the tenant's principals together may create per second; 0: no limit.
        task_create_burst_per_tenant: tasks the tenant may create at once before its rate applies.
    """

    max_running_per_tenant: int = 0
    max_running_per_principal: int = 0
    max_unfinished_per_principal: int = 0
    weight: float = 1.0
    task_create_rate_per_principal: float = 0.0
    task_create_burst_per_principal: int = 20
    task_create_rate_per_tenant: float = 0.0
    task_create_burst_per_tenant: int = 100


class TenantOverrides(FrozenJsonMapping[Mapping[str, float]]):
    """Per-tenant overrides: tenant → `{field name: value}` of `OVERRIDABLE` fields (immutable, hashable).

    `str()` is the JSON it was parsed from, normalised (sorted keys), or `""` when empty.
    """

    __slots__ = ()

    def __init__(self, items: Mapping[str, Mapping[str, float]] | None = None) -> None:
        super().__init__({tenant: dict(values) for tenant, values in (items or {}).items()})


def parse_overrides(text: str) -> TenantOverrides:
    """Parse `MCPTASKS_TENANT_LIMITS` (see the module docstring); an empty text is no override.

    Raises:
        ValueError: not a JSON object of objects, an unknown field (named), or a value `value_problem`
            refuses (named with its tenant).
    """
    if not text.strip():
        return TenantOverrides()
    try:
        data: Any = json.loads(text, parse_float=_finite_float, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise ValueError(f"must be a JSON object of tenant → limits ({exc.msg} at {exc.pos})") from exc
    except ValueError as exc:
        raise ValueError(f"must be a JSON object of tenant → limits of finite numbers ({exc})") from exc
    if not isinstance(data, dict):
        raise ValueError('must be a JSON object of tenant → limits, e.g. {"team-a": {"max_running_per_tenant": 4}}')
    kinds = {item.name: item.type for item in fields(TenantLimits)}
    parsed: dict[str, dict[str, float]] = {}
    for tenant, values in data.items():
        if not isinstance(values, dict):
            raise ValueError(f"tenant {tenant!r}: must be an object of limit → value")
        for name, value in values.items():
            if name not in OVERRIDABLE:
                raise ValueError(f"tenant {tenant!r}: unknown limit {name!r}; use {', '.join(OVERRIDABLE)}")
            problem = value_problem(name, value, str(kinds[name]))
            if problem is not None:
                raise ValueError(f"tenant {tenant!r}: {name} must be {problem}")
        parsed[str(tenant)] = {name: (int(v) if kinds[name] == "int" else float(v)) for name, v in values.items()}
    return TenantOverrides(parsed)


@dataclass(frozen=True, slots=True)
class LimitSettings:
    """Per-tenant and per-principal limits, shared by both executors and the gateway (group `limits`).

    Attributes:
        max_running_per_tenant: task runs one tenant may have at once, across its principals: tasks being
            run and synchronous calls running (a synchronous call over it is refused with HTTP 429 and
            `Retry-After`, since it cannot wait in a queue). Queued tasks over it wait as `working`. Default
            0: no limit (the executor's global cap and the fair claim order still share the slots).
        max_running_per_principal: task runs one principal may have at once, counted like
            `max_running_per_tenant`. Default 0: no limit.
        max_unfinished_per_principal: unfinished tasks (queued or running, `working` or `input_required`) one
            principal may hold; a `tools/call` that would create one more is refused (JSON-RPC -32603, HTTP
            429, `data.limit` = `max_unfinished_per_principal`) before anything is stored. Counted in the task
            store, so it holds across restarts. Default 0: no quota.
        task_create_rate_per_principal: tasks one principal may create per second, sustained (a token bucket
            refilled at this rate). Over it `tools/call` is refused with HTTP 429, `Retry-After` and
            `data.retryAfterMs`, nothing stored. Default 0: no rate limit.
        task_create_burst_per_principal: the bucket's size: tasks one principal may create at once before the
            rate applies. Default 20.
        task_create_rate_per_tenant: tasks all principals of one tenant may create per second, sustained.
            Default 0: no rate limit.
        task_create_burst_per_tenant: tasks one tenant may create at once before its rate applies. Default 100.
        tenant_limits: per-tenant overrides of the fields above and of `weight` (a tenant's share of the slots
            relative to other tenants' while both have tasks waiting; default 1, equal shares), one JSON
            object, tenant → {field: value}, e.g. `{"team-a": {"max_running_per_tenant": 8, "weight": 2}}`.
            Default: none.
        rate_limit_max_keys: most principals and tenants whose token buckets are kept in memory; past it
            the buckets closest to full (which lose nothing by being forgotten) are dropped first. Default
            100000 (about 10 MB).
        metrics_tenants: tenants whose queued and running tasks and refusals get a `tenant` label in the
            metrics (comma-separated); every other tenant is counted under `tenant="other"`. Default: none,
            so the labels stay bounded whoever calls.
    """

    max_running_per_tenant: int = 0
    max_running_per_principal: int = 0
    max_unfinished_per_principal: int = 0
    task_create_rate_per_principal: float = 0.0
    task_create_burst_per_principal: int = 20
    task_create_rate_per_tenant: float = 0.0
    task_create_burst_per_tenant: int = 100
    tenant_limits: TenantOverrides = field(default_factory=TenantOverrides)
    rate_limit_max_keys: int = 100_000
    metrics_tenants: frozenset[str] = frozenset()

    @property
    def everyone(self) -> TenantLimits:
        """The installation-wide limits (weight 1), before any tenant's override."""
        return TenantLimits(**{name: getattr(self, name) for name in OVERRIDABLE if name != "weight"})

    def for_tenant(self, tenant: str) -> TenantLimits:
        """The limits of `tenant`: the installation-wide values, with its override (if any) applied."""
        base = self.everyone
        override = self.tenant_limits.get(tenant)
        # `parse_overrides` made each value the field's own type (int or float) and named only known fields.
        return replace(base, **override) if override else base  # type: ignore[arg-type]

    @property
    def limits_running(self) -> bool:
        """Whether any running budget (per tenant or per principal, default or override) is set."""
        values: list[float] = [self.max_running_per_tenant, self.max_running_per_principal]
        for override in self.tenant_limits.values():
            values += [override.get("max_running_per_tenant", 0), override.get("max_running_per_principal", 0)]
        return any(values)

    @property
    def limits_creation(self) -> bool:
        """Whether any creation rate or unfinished-task quota (default or override) is set."""
        names = ("max_unfinished_per_principal", "task_create_rate_per_principal", "task_create_rate_per_tenant")
        return any(getattr(self, name) for name in names) or any(
            override.get(name, 0) for override in self.tenant_limits.values() for name in names
        )

    def check(self) -> None:
        """The group's own rules: every limit a finite number >= 0 (`value_problem`: integers whole and at
        most `MAX_COUNT`), bursts >= 1 where a rate is set (the overrides' values were checked when parsed).

        Raises:
            ValueError: naming the variable.
        """
        kinds = {item.name: str(item.type) for item in fields(TenantLimits)}
        for name in OVERRIDABLE:
            problem = None if name == "weight" else value_problem(name, getattr(self, name), kinds[name])
            if problem is not None:
                raise ValueError(f"MCPTASKS_{name.upper()} must be {problem}")
        for where, limits in [("MCPTASKS_TASK_CREATE_BURST_*", self.everyone)] + [
            (f"MCPTASKS_TENANT_LIMITS ({tenant!r})", self.for_tenant(tenant)) for tenant in self.tenant_limits
        ]:
            if (limits.task_create_rate_per_principal and limits.task_create_burst_per_principal < 1) or (
                limits.task_create_rate_per_tenant and limits.task_create_burst_per_tenant < 1
            ):
                raise ValueError(f"{where}: a burst must be >= 1 where its rate is set")
        if not 1 <= self.rate_limit_max_keys <= MAX_COUNT:
            keys = self.rate_limit_max_keys
            raise ValueError(f"MCPTASKS_RATE_LIMIT_MAX_KEYS must be between 1 and {MAX_COUNT}, got {keys}")
