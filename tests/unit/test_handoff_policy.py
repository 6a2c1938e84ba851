"""Which calls are handed off (docs/handoff.md): `execution.handoff` wins over the server's
`handoff_default`, and a `taskPolicy: never` tool never hands off. Our own choice (issue 34)."""

from __future__ import annotations

import pytest

from mcp_tasks.tasks.errors import InvalidToolManifest
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
