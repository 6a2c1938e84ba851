"""Header decoding (SEP-2243) and the integrity of pre-creation `requestState` (SEP-2322)."""

from __future__ import annotations

import pytest

from mcp_tasks.gateway import request_state
from mcp_tasks.protocol.errors import HeaderMismatch, InvalidParams
from mcp_tasks.protocol.headers import decode_header_value
from mcp_tasks.tasks.owner import Owner
from tests.clock import FakeClock

SECRET = b"k" * 32
ALICE = Owner("acme", "alice", "static")


def test_base64_sentinel_is_decoded_strictly() -> None:
    assert decode_header_value("=?base64?SGVsbG8=?=") == "Hello"
    assert decode_header_value("  plain  ") == "plain"
    assert decode_header_value("=?base64?SGVsbG8=") == "=?base64?SGVsbG8="
    for bad in ("=?base64?SGVsbG8?=", "=?base64?SGVs!!!bG8=?="):
        with pytest.raises(HeaderMismatch):
            decode_header_value(bad)


def test_request_state_is_bound_to_principal_tool_and_arguments() -> None:
    state = request_state.issue(SECRET, ALICE, "tool", {"a": 1}, ttl_s=60)
    request_state.verify(SECRET, state, ALICE, "tool", {"a": 1})
    for owner, tool, arguments, candidate in (
        (Owner("acme", "bob", "static"), "tool", {"a": 1}, state),
        (ALICE, "other", {"a": 1}, state),
        (ALICE, "tool", {"a": 2}, state),
        (ALICE, "tool", {"a": 1}, state + "-TAMPERED"),
        (ALICE, "tool", {"a": 1}, "garbage"),
    ):
        with pytest.raises(InvalidParams):
            request_state.verify(SECRET, candidate, owner, tool, arguments)


def test_request_state_is_valid_for_its_ttl_then_rejected() -> None:
    """SEP-2322 §requestState (integrity and expiry are ours to enforce): valid up to `ttl_s` after issue."""
    clock = FakeClock()
    state = request_state.issue(SECRET, ALICE, "tool", {}, ttl_s=60, clock=clock)
    clock.advance(60)
    request_state.verify(SECRET, state, ALICE, "tool", {}, clock=clock)
    clock.advance(1)
    with pytest.raises(InvalidParams):
        request_state.verify(SECRET, state, ALICE, "tool", {}, clock=clock)
