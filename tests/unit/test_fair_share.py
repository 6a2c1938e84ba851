"""The fair-share policy of every executor (`tasks.fair_share`) and its settings (`tasks.limits`), as tables.

Our own rule (docs/fair-share.md): the spec says nothing of how an executor shares its slots.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from mcp_tasks.cli.settings import Settings, SettingsError, from_environment, validate
from mcp_tasks.tasks import fair_share, limits
from mcp_tasks.tasks.fair_share import Queued, Usage
from mcp_tasks.tasks.limits import LimitSettings, TenantOverrides
from mcp_tasks.tasks.owner import Owner

T0 = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
ALICE = Owner("a", "alice", "static")
ANNE = Owner("a", "anne", "static")
BOB = Owner("b", "bob", "static")
CAROL = Owner("c", "carol", "static")


def queue(*tasks: tuple[Owner, float]) -> list[Queued]:
    """`(owner, created seconds after T0)` → queued tasks named `<subject>@<seconds>`."""
    return [Queued(f"{owner.subject}@{at:g}", owner, T0 + timedelta(seconds=at)) for owner, at in tasks]


A_BACKLOG = queue(*((ALICE, float(i)) for i in range(8)))
NO_LIMITS = LimitSettings()
WEIGHTED = LimitSettings(tenant_limits=TenantOverrides({"a": {"weight": 2}}))
A_CAPPED = LimitSettings(max_running_per_tenant=2)
ONE_EACH = LimitSettings(max_running_per_principal=1)

PICKS: list[tuple[str, list[Queued], Usage, LimitSettings, int, list[str]]] = [
    ("nothing waits: nothing picked", [], Usage(), NO_LIMITS, 2, []),
    ("no free slot: nothing picked", A_BACKLOG, Usage(), NO_LIMITS, 0, []),
    ("one tenant: oldest first", A_BACKLOG, Usage(), NO_LIMITS, 3, ["alice@0", "alice@1", "alice@2"]),
    (
        "a tenant with nothing running passes a backlog, however old",
        [*A_BACKLOG, *queue((BOB, 100))],
        Usage.of([ALICE, ALICE]),
        NO_LIMITS,
        1,
        ["bob@100"],
    ),
    (
        "two idle tenants alternate, oldest head first",
        [*queue((ALICE, 0), (ALICE, 1), (ALICE, 2)), *queue((BOB, 5), (BOB, 6))],
        Usage(),
        NO_LIMITS,
        4,
        ["alice@0", "bob@5", "alice@1", "bob@6"],
    ),
    (
        "equal usage: the older head wins",
        queue((ALICE, 3), (BOB, 1)),
        Usage.of([ALICE, BOB]),
        NO_LIMITS,
        1,
        ["bob@1"],
    ),
    (
        "weight 2 gets two slots for one",
        [*queue(*((ALICE, float(i)) for i in range(4))), *queue((BOB, 10), (BOB, 11))],
        Usage(),
        WEIGHTED,
        3,
        ["alice@0", "bob@10", "alice@1"],
    ),
    (
        "a tenant at its budget waits; others take the slots",
        [*A_BACKLOG, *queue((BOB, 50), (BOB, 51))],
        Usage.of([ALICE, ALICE]),
        A_CAPPED,
        3,
        ["bob@50", "bob@51"],
    ),
    ("a tenant alone at its budget: the slot stays free", A_BACKLOG, Usage.of([ALICE, ALICE]), A_CAPPED, 2, []),
    (
        "the tenant budget counts the picks of this pass too",
        A_BACKLOG,
        Usage.of([ALICE]),
        A_CAPPED,
        4,
        ["alice@0"],
    ),
    (
        "principals of a tenant take turns, fewest runs first",
        [*queue((ALICE, 0), (ALICE, 1), (ALICE, 2)), *queue((ANNE, 9))],
        Usage.of([ALICE]),
        NO_LIMITS,
        2,
        ["anne@9", "alice@0"],
    ),
    (
        "a principal at its budget: its tenant's other principals go",
        [*queue((ALICE, 0), (ALICE, 1)), *queue((ANNE, 9), (ANNE, 10))],
        Usage.of([ALICE]),
        ONE_EACH,
        3,
        ["anne@9"],
    ),
    (
        "three tenants, one slot each as they come",
        [*A_BACKLOG, *queue((BOB, 20), (BOB, 21)), *queue((CAROL, 30))],
        Usage.of([ALICE, ALICE, BOB]),
        NO_LIMITS,
        3,
        ["carol@30", "bob@20", "alice@0"],
    ),
    (
        "an override raises one tenant's budget",
        [*A_BACKLOG],
        Usage.of([ALICE, ALICE]),
        LimitSettings(max_running_per_tenant=2, tenant_limits=TenantOverrides({"a": {"max_running_per_tenant": 3}})),
        2,
        ["alice@0"],
    ),
]


@pytest.mark.parametrize(("name", "queued", "usage", "settings", "slots", "expected"), PICKS, ids=[p[0] for p in PICKS])
def test_pick(
    name: str, queued: list[Queued], usage: Usage, settings: LimitSettings, slots: int, expected: list[str]
) -> None:
    assert [task.task_id for task in fair_share.pick(queued, usage, settings, slots)] == expected, name
    assert [task.task_id for task in fair_share.pick(reversed(queued), usage, settings, slots)] == expected, (
        "the order of the input does not matter"
    )


def test_a_backlog_delays_another_tenant_by_at_most_one_slot_turnover() -> None:
    """The 8-against-1 scenario of issue 33 on the policy alone: two slots, A's eight tasks queued first,
    B's one after; B's is the first task started when a slot frees."""
    queued = [*A_BACKLOG, *queue((BOB, 2))]
    first = fair_share.pick(queued, Usage(), NO_LIMITS, 2)
    assert [task.task_id for task in first] == ["alice@0", "bob@2"]  # B even gets one of the two first slots
    waiting = [task for task in queued if task not in first[:1]]
    running = Usage.of([ALICE, ALICE])  # had A's two started before B's task was created
    assert [task.task_id for task in fair_share.pick(waiting, running, NO_LIMITS, 1)] == ["bob@2"]


BUDGETS: list[tuple[str, Owner, Usage, LimitSettings, str | None]] = [
    ("no limits", ALICE, Usage.of([ALICE] * 50), NO_LIMITS, None),
    ("under the tenant budget", ALICE, Usage.of([ALICE]), A_CAPPED, None),
    ("at the tenant budget", ALICE, Usage.of([ALICE, ANNE]), A_CAPPED, "max_running_per_tenant"),
    ("another tenant's runs do not count", BOB, Usage.of([ALICE, ALICE]), A_CAPPED, None),
    ("at the principal budget", ALICE, Usage.of([ALICE]), ONE_EACH, "max_running_per_principal"),
    ("another principal's runs do not count against mine", ANNE, Usage.of([ALICE]), ONE_EACH, None),
    (
        "the tenant budget is named first",
        ALICE,
        Usage.of([ALICE, ALICE]),
        LimitSettings(max_running_per_tenant=2, max_running_per_principal=1),
        "max_running_per_tenant",
    ),
]


@pytest.mark.parametrize(("name", "owner", "usage", "settings", "expected"), BUDGETS, ids=[b[0] for b in BUDGETS])
def test_over_budget(name: str, owner: Owner, usage: Usage, settings: LimitSettings, expected: str | None) -> None:
    assert fair_share.over_budget(owner, usage, settings) == expected, name


def test_usage_adds_up_store_rows_and_synchronous_calls() -> None:
    usage = Usage.counted([(ALICE, 2), (BOB, 1), (ALICE, 1)]).plus(Usage.of([ANNE]))
    assert usage.by_tenant == {"a": 4, "b": 1}
    assert usage.by_principal == {ALICE: 3, BOB: 1, ANNE: 1}


@pytest.mark.parametrize(
    ("unfinished", "settings", "expected"),
    [
        (10_000, NO_LIMITS, None),
        (4, LimitSettings(max_unfinished_per_principal=5), None),
        (5, LimitSettings(max_unfinished_per_principal=5), 5),
        (
            5,
            LimitSettings(
                max_unfinished_per_principal=5,
                tenant_limits=TenantOverrides({"a": {"max_unfinished_per_principal": 0}}),
            ),
            None,
        ),
    ],
)
def test_over_quota(unfinished: int, settings: LimitSettings, expected: int | None) -> None:
    assert fair_share.over_quota(unfinished, ALICE, settings) == expected


def test_queue_position_counts_only_the_callers_tenant() -> None:
    queued = [*queue((ALICE, 0), (BOB, 1), (ANNE, 2), (BOB, 3)), *queue((ALICE, 4))]
    assert [fair_share.ahead(task, queued) for task in queued] == [0, 0, 1, 1, 2]


@pytest.mark.parametrize(
    ("tasks_ahead", "held_by", "expected"),
    [
        (0, None, "queued: next in line for a slot"),
        (1, None, "queued: 1 of your tenant's tasks ahead"),
        (3, None, "queued: 3 of your tenant's tasks ahead"),
        (0, "max_running_per_tenant", "queued: next in line for a slot; your tenant is at its limit"),
        (2, "max_running_per_principal", "queued: 2 of your tenant's tasks ahead; you are at your limit"),
    ],
)
def test_queued_message(tasks_ahead: int, held_by: fair_share.RunningLimit | None, expected: str) -> None:
    message = fair_share.queued_message(tasks_ahead, held_by)
    assert message.startswith(expected)
    assert message.startswith(fair_share.QUEUED_PREFIX)


def test_a_tenant_override_changes_only_what_it_names() -> None:
    settings = LimitSettings(
        max_running_per_tenant=4,
        max_unfinished_per_principal=100,
        tenant_limits=limits.parse_overrides('{"a": {"max_running_per_tenant": 8, "weight": 2}}'),
    )
    assert settings.for_tenant("a").max_running_per_tenant == 8
    assert settings.for_tenant("a").weight == 2.0
    assert settings.for_tenant("a").max_unfinished_per_principal == 100
    assert settings.for_tenant("b") == settings.everyone
    assert settings.for_tenant("b").weight == 1.0
    assert settings.limits_running
    assert not LimitSettings(max_unfinished_per_principal=3).limits_running
    assert LimitSettings(max_unfinished_per_principal=3).limits_creation
    assert LimitSettings(tenant_limits=TenantOverrides({"a": {"task_create_rate_per_tenant": 1.0}})).limits_creation
    assert not LimitSettings(max_running_per_tenant=4).limits_creation


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[1]", "JSON object"),
        ("{", "JSON object"),
        ('{"a": 3}', "tenant 'a'"),
        ('{"a": {"max_running": 3}}', "unknown limit 'max_running'"),
        ('{"a": {"max_running_per_tenant": -1}}', "must be a number >= 0"),
        ('{"a": {"max_running_per_tenant": 1.5}}', "whole number"),
        ('{"a": {"weight": 0}}', "weight must be between 0.001 and 1000, got 0"),
        ('{"a": {"weight": true}}', "must be a number"),
        ('{"a": {"weight": 1e309}}', "1e309 is beyond the range of a number"),
        ('{"a": {"weight": 1e-320}}', "weight must be between 0.001 and 1000"),
        ('{"a": {"weight": NaN}}', "NaN is not a number"),
        ('{"a": {"task_create_rate_per_tenant": Infinity}}', "Infinity is not a number"),
        ('{"a": {"max_unfinished_per_principal": 99999999999999999999999}}', "at most 9223372036854775807"),
    ],
)
def test_bad_overrides_are_refused_naming_the_problem(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        limits.parse_overrides(text)


@pytest.mark.parametrize(
    ("variable", "text", "problem"),
    [
        ("MCPTASKS_TASK_CREATE_RATE_PER_PRINCIPAL", "nan", "MCPTASKS_TASK_CREATE_RATE_PER_PRINCIPAL must be a finite"),
        ("MCPTASKS_TASK_CREATE_RATE_PER_TENANT", "inf", "MCPTASKS_TASK_CREATE_RATE_PER_TENANT must be a finite"),
        ("MCPTASKS_TASK_CREATE_RATE_PER_TENANT", "-1", "MCPTASKS_TASK_CREATE_RATE_PER_TENANT must be a number >= 0"),
        (
            "MCPTASKS_MAX_UNFINISHED_PER_PRINCIPAL",
            "99999999999999999999999",
            "MCPTASKS_MAX_UNFINISHED_PER_PRINCIPAL must be at most 9223372036854775807",
        ),
        ("MCPTASKS_TASK_CREATE_BURST_PER_PRINCIPAL", str(2**63), "MCPTASKS_TASK_CREATE_BURST_PER_PRINCIPAL must be at"),
        ("MCPTASKS_TENANT_LIMITS", '{"a": {"weight": 1e309}}', "MCPTASKS_TENANT_LIMITS: .*1e309 is beyond"),
        ("MCPTASKS_TENANT_LIMITS", '{"a": {"weight": 1e-320}}', "MCPTASKS_TENANT_LIMITS: tenant 'a': weight must be"),
    ],
)
def test_a_limit_that_is_not_a_finite_number_in_range_fails_at_start_naming_its_variable(
    variable: str, text: str, problem: str, tmp_path: Path
) -> None:
    with pytest.raises(SettingsError, match=problem):
        validate(from_environment(Settings(), {variable: text, "MCPTASKS_TOOLS": str(tmp_path)}))


@pytest.mark.parametrize(("variable", "text"), [("MCPTASKS_MAX_UNFINISHED_PER_PRINCIPAL", str(2**63 - 1))])
def test_the_largest_integer_limit_sqlite_holds_is_accepted(variable: str, text: str, tmp_path: Path) -> None:
    settings = validate(from_environment(Settings(), {variable: text, "MCPTASKS_TOOLS": str(tmp_path)}))
    assert settings.limits.max_unfinished_per_principal == 2**63 - 1


def test_limits_come_from_the_environment_and_round_trip_through_the_settings_table() -> None:
    environ = {
        "MCPTASKS_MAX_RUNNING_PER_TENANT": "2",
        "MCPTASKS_MAX_UNFINISHED_PER_PRINCIPAL": "50",
        "MCPTASKS_TASK_CREATE_RATE_PER_PRINCIPAL": "0.5",
        "MCPTASKS_TENANT_LIMITS": '{"batch": {"max_running_per_tenant": 1}}',
        "MCPTASKS_METRICS_TENANTS": "team-a, team-b",
    }
    settings = from_environment(Settings(), environ).limits
    assert settings.max_running_per_tenant == 2
    assert settings.max_unfinished_per_principal == 50
    assert settings.task_create_rate_per_principal == 0.5
    assert settings.for_tenant("batch").max_running_per_tenant == 1
    assert settings.metrics_tenants == frozenset({"team-a", "team-b"})
    assert str(settings.tenant_limits) == '{"batch":{"max_running_per_tenant":1}}'
    with pytest.raises(SettingsError, match="MCPTASKS_TENANT_LIMITS"):
        from_environment(Settings(), {"MCPTASKS_TENANT_LIMITS": '{"a": {"nope": 1}}'})


@pytest.mark.parametrize(
    "settings",
    [
        LimitSettings(max_running_per_tenant=-1),
        LimitSettings(task_create_rate_per_principal=1.0, task_create_burst_per_principal=0),
        LimitSettings(
            tenant_limits=TenantOverrides(
                {"a": {"task_create_rate_per_tenant": 1.0, "task_create_burst_per_tenant": 0}}
            )
        ),
        LimitSettings(rate_limit_max_keys=0),
    ],
)
def test_the_limits_group_checks_itself(settings: LimitSettings) -> None:
    with pytest.raises(ValueError, match="MCPTASKS_"):
        settings.check()
