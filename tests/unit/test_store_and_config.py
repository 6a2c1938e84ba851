"""The SQLite store's compare-and-swap and durability settings; manifest and settings validation."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

import pytest

from mcp_tasks.cli.settings import ServeSettings, Settings, SettingsError, validate
from mcp_tasks.protocol.models import TaskStatus
from mcp_tasks.store.manifests import FileToolCatalog, load_manifest_file
from mcp_tasks.store.sqlite import SqliteTaskStore
from mcp_tasks.tasks import transitions
from mcp_tasks.tasks.errors import InvalidToolManifest, TaskNotFound, VersionConflict
from mcp_tasks.tasks.ids import mint_task_id
from mcp_tasks.tasks.interfaces import Writer, transact
from mcp_tasks.tasks.owner import Owner
from mcp_tasks.tasks.record import TaskRecord
from tests.conftest import REPO

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


async def test_store_is_wal_with_full_sync_and_cas_rejects_stale_writes(tmp_path: Path) -> None:
    tool = load_manifest_file(REPO / "conformance" / "tools" / "fixtures.yaml")[0]
    async with SqliteTaskStore(tmp_path / "t.sqlite3") as store:
        assert list(await store._w.execute_fetchall("PRAGMA journal_mode")) == [("wal",)]
        assert list(await store._w.execute_fetchall("PRAGMA synchronous")) == [(2,)]
        created = await store.create(
            transitions.new_task(mint_task_id(), Owner("a", "b", "static"), tool, {"n": 2**70}, NOW)
        )
        assert (await store.get(created.task_id)).arguments == {"n": 2**70}
        first = await store.compare_and_swap(dataclasses.replace(created, status_message="one"), Writer.EXECUTOR)
        with pytest.raises(VersionConflict):
            await store.compare_and_swap(dataclasses.replace(created, status_message="stale"), Writer.EXECUTOR)
        assert (await store.get(created.task_id)).status_message == "one"
        assert first.version == "2"
        with pytest.raises(TaskNotFound):
            await store.get(created.task_id, Owner("a", "someone-else", "static"))


async def test_a_foreign_task_is_refused_without_reading_its_body(tmp_path: Path) -> None:
    """Owner first (our rule, ARCHITECTURE.md §Ownership): the owner check needs none of the payload, so a
    foreign task costs what an unknown id costs whatever its size. Shown without a clock: with its body
    overwritten by bytes that do not decode, another principal still gets the plain `TaskNotFound`."""
    tool = load_manifest_file(REPO / "conformance" / "tools" / "fixtures.yaml")[0]
    path = tmp_path / "t.sqlite3"
    async with SqliteTaskStore(path) as store:
        owner = Owner("acme", "alice", "static")
        created = await store.create(transitions.new_task(mint_task_id(), owner, tool, {"pad": "x" * 900_000}, NOW))
        await store._w.execute("UPDATE tasks SET body = ? WHERE task_id = ?", (b"\xff not a record", created.task_id))
        for intruder in (Owner("acme", "bob", "static"), Owner("evil", "alice", "static")):
            with pytest.raises(TaskNotFound):
                await store.get(created.task_id, intruder)
        with pytest.raises(Exception) as decoded:  # the owner's read does decode, and so trips on the bytes
            await store.get(created.task_id, owner)
        assert not isinstance(decoded.value, TaskNotFound)


async def test_store_refuses_a_newer_schema(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite3"
    async with SqliteTaskStore(path) as store:
        await store._w.execute("PRAGMA user_version = 99")
    with pytest.raises(RuntimeError, match="newer than this build"):
        await SqliteTaskStore(path).open()


def test_a_broken_manifest_names_its_file_and_field(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text(
        "apiVersion: mcptasks.io/v1alpha1\nkind: McpTool\nmetadata: {name: x}\n"
        "spec: {name: x, description: d, inputSchema: {type: array}, container: {command: [x]}}\n"
    )
    with pytest.raises(InvalidToolManifest, match=r"bad\.yaml.*inputSchema"):
        FileToolCatalog([tmp_path])


def test_non_loopback_bind_without_tokens_is_refused() -> None:
    settings = Settings(serve=ServeSettings(host="0.0.0.0", tools_dirs=(REPO / "examples" / "tools",)))
    with pytest.raises(SettingsError, match="--tokens"):
        validate(settings)


def test_every_setting_has_one_environment_variable_and_the_docs_list_them_all() -> None:
    from mcp_tasks.cli.settings import setting_fields, settings_table

    settable = setting_fields()
    by_variable: dict[str, set[str]] = {}
    for item in settable:
        by_variable.setdefault(item.variable, set()).add(item.name)
        assert item.doc, f"{item.group}.{item.name} is not described in its group's docstring"
    # one variable names one setting; a limit shared by two groups has one variable for both
    assert all(len(names) == 1 for names in by_variable.values()), by_variable
    docs = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    assert settings_table() in docs, "run `mcptasks settings` and paste the table into docs/configuration.md"


def test_the_environment_reaches_fields_that_had_no_variable_and_shared_limits_reach_both_groups() -> None:
    from mcp_tasks.cli.settings import from_environment

    settings = from_environment(
        Settings(),
        {
            "MCPTASKS_ALLOWED_ORIGINS": "https://app.example.com, https://b.example.com",
            "MCPTASKS_WORKER_HOST": "127.0.0.9",
            "MCPTASKS_INLINE_RESULT_MAX_BYTES": "1000",
            "MCPTASKS_LOG_JSON": "true",
            "MCPTASKS_TOOL_SERVICE_ACCOUNT": "",
        },
    )
    assert settings.gateway.allowed_origins == {"https://app.example.com", "https://b.example.com"}
    assert settings.operator.worker_host == "127.0.0.9"
    assert settings.runner.inline_result_max_bytes == settings.operator.inline_result_max_bytes == 1000
    assert settings.serve.log_json is True and settings.operator.service_account is None
    with pytest.raises(SettingsError, match="MCPTASKS_LIST_PAGE_SIZE must be an integer"):
        from_environment(Settings(), {"MCPTASKS_LIST_PAGE_SIZE": "ten"})
    with pytest.raises(SettingsError, match="MCPTASKS_LOG_JSON must be true or false"):
        from_environment(Settings(), {"MCPTASKS_LOG_JSON": "maybe"})


class LaggingCache(SqliteTaskStore):
    """A store whose ordinary reads lag one write behind, as a gateway's cache may behind another replica."""

    stale: TaskRecord | None = None

    async def get(self, task_id: str, owner: Owner | None = None, *, fresh: bool = False) -> TaskRecord:
        if not fresh and self.stale is not None:
            return self.stale
        return await super().get(task_id, owner, fresh=fresh)


async def test_an_answer_is_not_dropped_because_a_cached_copy_lags(tmp_path: Path) -> None:
    """`transact(confirm_no_change=True)`: "key not pending" is decided again on an authoritative read."""
    tool = load_manifest_file(REPO / "conformance" / "tools" / "fixtures.yaml")[0]
    lagging = LaggingCache(tmp_path / "t.sqlite3")
    async with lagging as store:
        created = await store.create(transitions.new_task(mint_task_id(), Owner("a", "b", "static"), tool, {}, NOW))
        request = {"method": "elicitation/create", "params": {"message": "?", "requestedSchema": {"type": "object"}}}
        asked, _ = transitions.add_input_requests(created, [("k", request)], NOW)
        await store.compare_and_swap(asked, Writer.EXECUTOR)
        lagging.stale = created  # this replica has not seen the ask yet
        answer = {"k": {"action": "accept", "content": {}}}

        def apply(record: TaskRecord) -> tuple[TaskRecord, None]:
            return transitions.answer_input_requests(record, answer, NOW), None

        unchanged, _ = await transact(store, created.task_id, apply, Writer.CLIENT)
        assert unchanged.input_responses == {}, "without confirmation the cached copy decides: dropped"
        lagging.stale = created
        answered, _ = await transact(store, created.task_id, apply, Writer.CLIENT, confirm_no_change=True)
        assert answered.input_responses == answer and answered.status is TaskStatus.WORKING
