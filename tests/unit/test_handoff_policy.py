"""Which calls are handed off (docs/handoff.md): `execution.handoff` wins over the server's
`handoff_default`, and a `taskPolicy: never` tool never hands off. Our own choice (issue 34)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from mcp_tasks.cli.settings import Settings, SettingsError, from_environment, validate
from mcp_tasks.gateway import handoff
from mcp_tasks.tasks.errors import InvalidToolManifest
from mcp_tasks.tasks.tools import ToolSpec
from tests.unit.manifests import tool_spec


@pytest.mark.parametrize("default", [False, True])
def test_a_tool_that_leaves_handoff_unset_follows_the_server_default(default: bool) -> None:
    assert tool_spec().hands_off(default) is default
    assert tool_spec(taskPolicy="required").hands_off(default) is default


@pytest.mark.parametrize("default", [False, True])
def test_a_tools_own_handoff_wins_over_the_server_default(default: bool) -> None:
    assert tool_spec(handoff=True).hands_off(default) is True
    assert tool_spec(handoff=False).hands_off(default) is False


def test_a_tool_that_is_never_a_task_never_hands_off() -> None:
    assert tool_spec(taskPolicy="never", handoff=True).hands_off(True) is False


def test_handoff_must_be_a_boolean() -> None:
    with pytest.raises(InvalidToolManifest, match=r"execution\.handoff"):
        tool_spec(handoff="sometimes")


def _with_output_schema(schema: dict[str, Any], **execution: Any) -> ToolSpec:
    spec = tool_spec(**execution)
    manifest = spec.manifest.model_copy(update={"output_schema": schema})
    return dataclasses.replace(spec, manifest=manifest, tool=spec.tool.model_copy(update={"output_schema": schema}))


def test_a_tool_that_hands_off_lists_an_output_schema_its_handoff_answer_matches() -> None:
    """Clients check `structuredContent` against the listed `outputSchema` (the TypeScript SDK 1.x refuses a
    mismatch): the listed schema admits the tool's own results and the handoff answer, keeps `$defs` at the
    root for its `$ref`s, and is unchanged for a tool that does not hand off."""
    schema = {
        "type": "object",
        "$defs": {"count": {"type": "integer"}},
        "properties": {"primeCount": {"$ref": "#/$defs/count"}},
        "required": ["primeCount"],
    }
    listed = handoff.as_listed(_with_output_schema(schema, handoff=True), default=False).output_schema
    assert listed is not None and listed["$defs"] == schema["$defs"]
    validator = Draft202012Validator(listed)
    assert validator.is_valid({"primeCount": 168})
    assert validator.is_valid({"taskId": "ab" * 16, "status": "working", "pollIntervalMs": 1000})
    assert not validator.is_valid({"primeCount": "many"}), "the tool's own results are still checked"
    plain = _with_output_schema(schema, handoff=False)
    assert handoff.as_listed(plain, default=False).output_schema == schema


@pytest.mark.parametrize(
    ("declared", "recorded"),
    [
        ({}, {"elicitation": {"form": {}}}),
        ({"elicitation": {}}, {"elicitation": {"form": {}}}),
        ({"elicitation": {"url": {}}}, {"elicitation": {"url": {}, "form": {}}}),
        ({"sampling": {}, "experimental": {"x": {}}}, {"sampling": {}, "elicitation": {"form": {}}}),
        ({"roots": {"listChanged": True}}, {"roots": {"listChanged": True}, "elicitation": {"form": {}}}),
    ],
)
def test_a_handed_off_task_may_ask_a_form_question_and_what_its_request_declared(
    declared: dict[str, Any], recorded: dict[str, Any]
) -> None:
    """A form question always (the model asks its user and answers with `task_respond`); a URL to open,
    sampling or the roots only where the request declared them; other capabilities are not input kinds."""
    assert handoff.answerable(declared) == recorded


@pytest.mark.parametrize(
    ("environment", "named"),
    [
        ({"MCPTASKS_HANDOFF_STATUS_TOOL": "task status"}, "MCPTASKS_HANDOFF_STATUS_TOOL"),
        ({"MCPTASKS_HANDOFF_CANCEL_TOOL": ""}, "MCPTASKS_HANDOFF_CANCEL_TOOL"),
        ({"MCPTASKS_HANDOFF_RESPOND_TOOL": "task_status"}, "three different names"),
    ],
)
def test_follow_tool_names_that_are_not_tool_names_or_collide_fail_at_start_up(
    environment: dict[str, str], named: str
) -> None:
    with pytest.raises(SettingsError, match=named):
        validate(from_environment(Settings(), environment), "gateway")


def test_renamed_follow_tools_keep_their_schemas_and_name_each_other() -> None:
    renamed = handoff.follow_tools("bg_status", "bg_respond", "bg_cancel")
    assert [tool.name for tool in renamed.tools] == ["bg_status", "bg_respond", "bg_cancel"]
    assert [tool.input_schema for tool in renamed.tools] == [tool.input_schema for tool in handoff.follow_tools().tools]
    status, respond, cancel = (tool.description or "" for tool in renamed.tools)
    assert "bg_respond" in status and "bg_status" in respond and "bg_status" in cancel
    assert "task_" not in status + respond + cancel
