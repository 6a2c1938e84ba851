"""Owners name who vouched for them, and a store keeps what a newer version wrote (issue 30), on a real
SQLite file and through the Kubernetes mapping (the api-server side is in tests/kube)."""

from __future__ import annotations

import dataclasses
import json
import logging
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

from mcp_tasks.cli.settings import ServeSettings, Settings, SettingsError, legacy_owner_issuer, validate
from mcp_tasks.gateway.identity.settings import AuthSettings
from mcp_tasks.gateway.identity.tenants import TenantPolicy
from mcp_tasks.store.kubernetes import mapping
from mcp_tasks.store.manifests import load_manifest_file
from mcp_tasks.store.sqlite import SqliteTaskStore
from mcp_tasks.store.sqlite.migrations import MIGRATIONS
from mcp_tasks.tasks import transitions
from mcp_tasks.tasks.errors import TaskNotFound
from mcp_tasks.tasks.ids import mint_task_id
from mcp_tasks.tasks.interfaces import Writer
from mcp_tasks.tasks.owner import LOCAL_OWNER, UNKNOWN_ISSUER, Owner
from mcp_tasks.tasks.record import TaskRecord
from tests.conftest import REPO

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
IDP_A = "https://idp-a.example"
IDP_B = "https://idp-b.example"
ALICE_STATIC = Owner("tenant-a", "alice", "static")


def _task(owner: Owner, **arguments: object) -> TaskRecord:
    tool = load_manifest_file(REPO / "conformance" / "tools" / "fixtures.yaml")[0]
    return transitions.new_task(mint_task_id(), owner, tool, dict(arguments), NOW)


async def test_the_same_tenant_and_subject_through_another_issuer_is_another_owner(tmp_path: Path) -> None:
    """Neither a second OIDC issuer nor an OIDC token naming a static principal's tenant and subject reads
    its task: each gets what an unknown id gets."""
    async with SqliteTaskStore(tmp_path / "t.sqlite3") as store:
        theirs = await store.create(_task(Owner("tenant-a", "alice", IDP_A)))
        static = await store.create(_task(ALICE_STATIC))
        assert (await store.get(theirs.task_id, Owner("tenant-a", "alice", IDP_A))).task_id == theirs.task_id
        for task_id, intruder in (
            (theirs.task_id, Owner("tenant-a", "alice", IDP_B)),
            (theirs.task_id, ALICE_STATIC),
            (static.task_id, Owner("tenant-a", "alice", IDP_A)),
            (static.task_id, Owner("tenant-a", "alice", "kubernetes")),
            (static.task_id, Owner("tenant-a", "alice", UNKNOWN_ISSUER)),
        ):
            with pytest.raises(TaskNotFound) as refused:
                await store.get(task_id, intruder)
            assert str(refused.value) == str(TaskNotFound(task_id))
        assert ALICE_STATIC.mechanism == "static" and Owner("t", "s", IDP_A).mechanism == "oidc"
        assert LOCAL_OWNER.mechanism == "local" and Owner("t", "s", UNKNOWN_ISSUER).mechanism == "unknown"


def _schema_1_database(path: Path, source: Path, task_id: str) -> None:
    """A database as the previous release left it (schema 1, no issuer column) holding `task_id`'s row."""
    with sqlite3.connect(source) as current:
        columns = [row[1] for row in current.execute("PRAGMA table_info(tasks)") if row[1] != "issuer"]
        row = current.execute(f"SELECT {', '.join(columns)} FROM tasks WHERE task_id = ?", (task_id,)).fetchone()
    with sqlite3.connect(path) as old:
        old.executescript(MIGRATIONS[0])
        old.execute(f"INSERT INTO tasks ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})", row)
        old.execute("PRAGMA user_version = 1")


async def test_a_task_stored_before_owners_named_their_issuer_gets_exactly_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Upgrade from schema 1: the rows get the one configured issuer; with none known they stay readable
    by nobody (and the log says which setting names it); no mapping lets a second issuer in."""
    async with SqliteTaskStore(tmp_path / "now.sqlite3") as store:
        created = await store.create(_task(ALICE_STATIC))
    _schema_1_database(tmp_path / "unknown.sqlite3", tmp_path / "now.sqlite3", created.task_id)
    _schema_1_database(tmp_path / "named.sqlite3", tmp_path / "now.sqlite3", created.task_id)

    with caplog.at_level(logging.WARNING, "mcp_tasks.store.sqlite"):
        async with SqliteTaskStore(tmp_path / "unknown.sqlite3") as store:
            for anyone in (ALICE_STATIC, Owner("tenant-a", "alice", IDP_A), Owner("tenant-a", "alice", "")):
                with pytest.raises(TaskNotFound):
                    await store.get(created.task_id, anyone)
    assert "MCPTASKS_LEGACY_OWNER_ISSUER" in caplog.text

    async with SqliteTaskStore(tmp_path / "named.sqlite3", legacy_issuer="static") as store:
        assert (await store.get(created.task_id, ALICE_STATIC)).owner == ALICE_STATIC
        with pytest.raises(TaskNotFound):
            await store.get(created.task_id, Owner("tenant-a", "alice", IDP_A))
    async with SqliteTaskStore(tmp_path / "named.sqlite3", legacy_issuer=IDP_A) as store:
        assert (await store.get(created.task_id, ALICE_STATIC)).owner == ALICE_STATIC, "named once, kept"


def test_the_legacy_issuer_is_the_configured_one_or_the_only_trusted_one() -> None:
    tokens = Path("tokens.yaml")
    only_static = Settings(serve=ServeSettings(tokens_file=tokens))
    assert legacy_owner_issuer(only_static) == "static"
    assert legacy_owner_issuer(Settings()) == "local"
    both = Settings(serve=ServeSettings(tokens_file=tokens), auth=AuthSettings(oidc_issuer=(IDP_A,)))
    assert legacy_owner_issuer(both) == UNKNOWN_ISSUER
    chosen = dataclasses.replace(both, auth=dataclasses.replace(both.auth, legacy_owner_issuer=IDP_A))
    assert legacy_owner_issuer(chosen) == IDP_A
    untrusted = dataclasses.replace(both, auth=dataclasses.replace(both.auth, legacy_owner_issuer=IDP_B))
    with pytest.raises(SettingsError, match=r"MCPTASKS_LEGACY_OWNER_ISSUER names 'https://idp-b\.example'"):
        validate(untrusted)


def test_an_issuer_vouches_only_for_the_tenants_its_patterns_match() -> None:
    """`MCPTASKS_ISSUER_TENANTS` (issue 30 §1): listed issuers are limited, unlisted ones are not; an issuer
    URL may hold `=` (the pattern is after the last one); bad entries and untrusted issuers fail at start."""
    policy = TenantPolicy.parse([f"{IDP_A}=team-*", f"{IDP_A}=ops", "kubernetes=agents-a", "https://q.example/?a=b=x"])
    assert policy.allows(IDP_A, "team-blue") and policy.allows(IDP_A, "ops")
    assert not policy.allows(IDP_A, "tenant-a") and not policy.allows(IDP_A, "Team-blue")
    assert not policy.allows(IDP_A, "opsx") and not policy.allows("kubernetes", "agents-b")
    assert policy.allows(IDP_B, "anything") and policy.allows("https://q.example/?a=b", "x")
    assert policy.describe(IDP_A) == "team-*, ops"
    for bad in ("team-a", f"{IDP_A}=", "=team-a"):
        with pytest.raises(ValueError, match="ISSUER=TENANT_PATTERN"):
            TenantPolicy.parse([bad])
    tools = ServeSettings(tools_dirs=(REPO / "conformance" / "tools",))
    trusting_a = Settings(serve=tools, auth=AuthSettings(oidc_issuer=(IDP_A,)))
    assert validate(
        dataclasses.replace(trusting_a, auth=dataclasses.replace(trusting_a.auth, issuer_tenants=(f"{IDP_A}=t",)))
    )
    for entries, named in (((f"{IDP_B}=t",), "'https://idp-b.example'"), (("static=t",), "'static'"), (("x",), "")):
        wrong = dataclasses.replace(trusting_a, auth=dataclasses.replace(trusting_a.auth, issuer_tenants=entries))
        with pytest.raises(SettingsError, match="MCPTASKS_ISSUER_TENANTS") as refused:
            validate(wrong)
        assert named in str(refused.value)


async def test_a_body_field_of_a_newer_version_survives_this_versions_rewrite(tmp_path: Path) -> None:
    async with SqliteTaskStore(tmp_path / "t.sqlite3") as store:
        created = await store.create(_task(ALICE_STATIC))
        rows = await store._w.execute_fetchall("SELECT body FROM tasks WHERE task_id = ?", (created.task_id,))
        body = json.loads(next(iter(rows))[0])
        body["futureField"] = {"kept": [1, 2]}
        await store._w.execute("UPDATE tasks SET body = ? WHERE task_id = ?", (json.dumps(body), created.task_id))
        read = await store.get(created.task_id, ALICE_STATIC)
        assert read.unknown_fields == {"futureField": {"kept": [1, 2]}}
        await store.compare_and_swap(dataclasses.replace(read, status_message="rewritten"), Writer.EXECUTOR)
        after = await store.get(created.task_id, ALICE_STATIC)
        assert after.status_message == "rewritten" and after.unknown_fields == {"futureField": {"kept": [1, 2]}}


def test_fields_of_a_newer_version_are_read_and_written_back_on_kubernetes() -> None:
    """A newer replica's spec and status fields parse here, and this version's next writes of either
    carry them unchanged (instead of failing the task as malformed, or pruning them)."""
    record = _task(ALICE_STATIC)
    obj = mapping.new_object(record, "ns")
    obj["metadata"]["resourceVersion"] = "7"
    obj["spec"]["futureSpec"] = "s"
    obj["status"] = {"taskStatus": "working", "lastUpdatedAt": obj["spec"]["createdAt"], "futureStatus": {"a": 1}}
    read = mapping.to_record(obj)
    assert read.owner == ALICE_STATIC
    plan = mapping.plan_write(mapping.parse(obj), dataclasses.replace(read, status_message="x"), Writer.EXECUTOR)
    assert plan.status is not None and mapping.dump(plan.status)["futureStatus"] == {"a": 1}
    cancel = transitions.request_cancel(read, "client", NOW)
    plan = mapping.plan_write(mapping.parse(obj), cancel, Writer.CLIENT)
    assert plan.spec is not None and mapping.dump(plan.spec)["futureSpec"] == "s"


def test_an_mcptask_stored_without_an_issuer_is_owned_through_the_legacy_one_only() -> None:
    record = _task(ALICE_STATIC)
    obj = mapping.new_object(record, "ns")
    obj["metadata"]["resourceVersion"] = "3"
    del obj["spec"]["owner"]["issuer"]
    assert mapping.to_record(obj).owner == Owner("tenant-a", "alice", UNKNOWN_ISSUER)
    legacy = mapping.parse(obj, "static")
    assert legacy.record.owner == ALICE_STATIC
    cancel = transitions.request_cancel(legacy.record, "client", NOW)
    plan = mapping.plan_write(legacy, cancel, Writer.CLIENT)  # the owner's own write is not a changed owner
    assert plan.spec is not None and "issuer" not in mapping.dump(plan.spec)["owner"]


LAST_RELEASED_SCHEMA = 2
"""The schema version the previous builds know: each refuses a file whose `user_version` is higher."""


async def test_the_fair_share_indexes_leave_the_file_openable_by_builds_of_the_previous_schema(tmp_path: Path) -> None:
    """The indexes fair share reads are not a schema version: the file stays at the version the previous
    builds know (they refuse a newer one), and rows such a build writes afterwards, knowing nothing of the
    indexes, are in them when this build opens the file again."""
    path = tmp_path / "tasks.sqlite3"
    async with SqliteTaskStore(path) as store:
        first = await store.create(_task(ALICE_STATIC))
    with sqlite3.connect(path) as older:  # a rolled-back build: plain writes, the same table
        assert older.execute("PRAGMA user_version").fetchone() == (LAST_RELEASED_SCHEMA,)
        indexes = {row[0] for row in older.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert {"tasks_queued", "tasks_queued_tenant", "tasks_leased"} <= indexes
        columns = [row[1] for row in older.execute("PRAGMA table_info(tasks)")]
        row = list(older.execute(f"SELECT {', '.join(columns)} FROM tasks").fetchone())
        second_id = mint_task_id()
        row[columns.index("task_id")] = second_id
        row[columns.index("body")] = json.dumps({**json.loads(row[columns.index("body")]), "taskId": second_id})
        older.execute(f"INSERT INTO tasks ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})", row)
    async with SqliteTaskStore(path) as store:
        heads = await store.queued_heads(per_principal=5)
    assert sorted(task.task_id for task in heads) == sorted([first.task_id, second_id])
    with sqlite3.connect(path) as reopened:
        assert reopened.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert reopened.execute("PRAGMA user_version").fetchone() == (LAST_RELEASED_SCHEMA,)
