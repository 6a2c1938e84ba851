"""`store.kubernetes.limits.check_object`: the 64-bit check's fast path refuses exactly what the full walk does."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_tasks.store.kubernetes import limits
from mcp_tasks.tasks.errors import ResultTooLarge, UnstorableValue

BIG = 1024 * 1024

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet="0123456789-x", max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20,
)


def _walk_refuses(value: Any) -> bool:
    """The reference: any int (not bool) outside int64, found by walking everything."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return not limits.INT64_MIN <= value <= limits.INT64_MAX
    if isinstance(value, dict):
        return any(_walk_refuses(item) for item in value.values())
    if isinstance(value, list):
        return any(_walk_refuses(item) for item in value)
    return False


@given(JSON_VALUES)
def test_an_integer_beyond_64_bits_is_refused_wherever_it_is_and_nothing_else(arguments: Any) -> None:
    body = {"spec": {"arguments": arguments}}
    try:
        limits.check_object(body, "t", "spec", BIG)
    except UnstorableValue as exc:
        assert _walk_refuses(arguments), exc
        assert "signed 64-bit range" in str(exc)
    else:
        assert not _walk_refuses(arguments)


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, 10**30])
def test_the_refusal_names_the_field_as_the_client_knows_it(value: int) -> None:
    with pytest.raises(UnstorableValue, match=r"^arguments/a/1 is an integer outside"):
        limits.check_object({"spec": {"arguments": {"a": [0, value]}}}, "t", "spec", BIG)


def test_digits_in_a_string_are_kept_and_int64_bounds_pass() -> None:
    limits.check_object(
        {"spec": {"arguments": {"id": "1" * 40, "max": limits.INT64_MAX, "min": limits.INT64_MIN}}}, "t", "spec", BIG
    )


def test_a_status_too_large_is_a_result_too_large_and_a_spec_too_large_is_unstorable() -> None:
    body = {"status": {"result": "x" * 200}}
    with pytest.raises(ResultTooLarge):
        limits.check_object(body, "t", "status", 100)
    with pytest.raises(UnstorableValue, match="arguments and answers take"):
        limits.check_object({"spec": body["status"]}, "t", "spec", 100)
