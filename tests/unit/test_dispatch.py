"""The method table (`gateway.dispatch`), the params parsers (`protocol.params`) and the one error mapper.

Issue 30 §2 and REVIEW.md item 1: typed routes that carry their params, their era and the caller.
"""

from __future__ import annotations

import typing
from collections import Counter

import pytest
from mcp_types import jsonrpc

from mcp_tasks.gateway import dispatch, transport
from mcp_tasks.gateway.context import Era, RequestContext
from mcp_tasks.gateway.identity.principal import Identity
from mcp_tasks.protocol import constants
from mcp_tasks.protocol.errors import InvalidParams, MethodNotFound, ServiceUnavailable, TooManyRequests
from mcp_tasks.protocol.models import TaskRequestParams
from mcp_tasks.protocol.params import (
    CallToolParams,
    InitializeParams,
    ListenParams,
    PageParams,
    ReadResourceParams,
    page_cursor,
    validated,
)
from mcp_tasks.tasks import errors


def test_each_method_has_one_row_in_each_era_that_serves_it() -> None:
    """Our choice: one table, one row per (method, era); a method served alike in both eras is one row."""
    pairs = Counter((row.method, era) for row in dispatch.ROUTES for era in row.eras)
    assert [pair for pair, count in pairs.items() if count > 1] == []
    for row in dispatch.ROUTES:
        for era in row.eras:
            found = dispatch.notification(era, row.method) if row.notification else dispatch.route(era, row.method)
            assert found is row


def test_each_era_serves_only_its_own_methods() -> None:
    """MCP 2026-07-28 `versioning.mdx`: `initialize` and `ping` are legacy only, `tasks/*`, `server/discover`
    and `subscriptions/listen` modern only; the removed `tasks/result`/`tasks/list` are -32601 in both."""
    legacy_only = {constants.METHOD_INITIALIZE, constants.METHOD_PING}
    modern_only = {*constants.TASK_METHODS, constants.METHOD_DISCOVER, constants.METHOD_SUBSCRIPTIONS_LISTEN}
    for era, absent in ((Era.MODERN, legacy_only), (Era.LEGACY, modern_only)):
        for method in (*absent, "tasks/result", "tasks/list", constants.NOTIFICATION_CANCELLED):
            with pytest.raises(MethodNotFound):
                dispatch.route(era, method)
    assert dispatch.notification(Era.LEGACY, constants.NOTIFICATION_CANCELLED) is not None
    assert dispatch.notification(Era.LEGACY, constants.METHOD_TOOLS_CALL) is None  # a request sent without an id
    assert [row.method for row in dispatch.ROUTES if row.notification and Era.MODERN in row.eras] == []
    assert {row.method for row in dispatch.ROUTES if row.needs_tasks_extension} == constants.TASK_METHODS


def test_a_handler_context_always_names_its_caller() -> None:
    """Issue 30 §2, fail closed: a handler is reached only through a `RequestContext`, whose caller is a required
    `Identity` (no default, no `None`), and every row's handler takes that context first."""
    hints = typing.get_type_hints(RequestContext)
    assert hints["identity"] is Identity
    assert hints["era"] is Era
    identity_field = RequestContext.__dataclass_fields__["identity"]
    assert identity_field.default is identity_field.default_factory  # both MISSING: no default caller
    for row in dispatch.ROUTES:
        first = next(iter(typing.get_type_hints(row.handler).values()))
        assert first is RequestContext, row.method


REACHABLE: dict[type[errors.TaskError], tuple[errors.TaskError, int]] = {
    errors.TaskNotFound: (errors.TaskNotFound("x"), jsonrpc.INVALID_PARAMS),
    errors.InvalidInputResponse: (errors.InvalidInputResponse("inputResponses['k'] …"), jsonrpc.INVALID_PARAMS),
    errors.InputCapabilityMissing: (
        errors.InputCapabilityMissing("elicitation.url", constants.METHOD_ELICIT),
        jsonrpc.MISSING_REQUIRED_CLIENT_CAPABILITY,
    ),
    errors.UnstorableValue: (errors.UnstorableValue("x is beyond 64 bits"), jsonrpc.INVALID_PARAMS),
    errors.VersionConflict: (errors.VersionConflict("too many writers"), jsonrpc.INTERNAL_ERROR),
    errors.StoreUnavailable: (errors.StoreUnavailable("timed out"), jsonrpc.INTERNAL_ERROR),
    errors.LimitReached: (
        errors.LimitReached("over", "task_create_rate_per_principal", 1.0, 1500),
        jsonrpc.INTERNAL_ERROR,
    ),
}
"""Domain errors a handler can meet (a store read or a client write, the client's own transitions), with the
JSON-RPC code each is answered with."""

UNREACHABLE: dict[type[errors.TaskError], str] = {
    errors.WrongWriter: "the gateway writes only as Writer.CLIENT what a client may change; a mix-up is a bug",
    errors.IllegalTransition: "the client's moves leave a terminal task as it is; only executors' moves raise it",
    errors.LeaseLost: "leases are taken and renewed by executors only",
    errors.ResultTooLarge: "raised on an executor's status write; a client write too large is UnstorableValue",
    errors.ToolNotFound: "the gateway asks catalog.get_tool, which answers None (the -32602 unknown tool)",
    errors.InvalidToolManifest: "manifests are read at start-up and by the catalog's watch, never by a request",
}
"""Domain errors no handler meets, and why: each would be a bug, answered -32603 and logged."""


def _subclasses(kind: type[errors.TaskError]) -> set[type[errors.TaskError]]:
    found = set(kind.__subclasses__())
    return found.union(*(_subclasses(sub) for sub in found))


def test_every_domain_error_a_handler_can_meet_is_mapped_to_its_json_rpc_error() -> None:
    """CONVENTIONS.md §Errors: domain errors map by one table; a new `TaskError` must be placed in one list."""
    assert _subclasses(errors.TaskError) == REACHABLE.keys() | UNREACHABLE.keys()
    assert not REACHABLE.keys() & UNREACHABLE.keys()
    assert set(transport._DOMAIN_ERRORS) == set(REACHABLE)
    for kind, (instance, code) in REACHABLE.items():
        assert type(instance) is kind
        mapped = transport.map_exception(instance)
        assert mapped.code == code, kind
        if code == jsonrpc.INTERNAL_ERROR:  # only "retry" (503) or "over a limit" (429): never the generic -32603
            assert (isinstance(mapped, ServiceUnavailable) and mapped.http_status == 503) or (
                isinstance(mapped, TooManyRequests) and mapped.http_status == 429
            ), kind
    limited = transport.map_exception(REACHABLE[errors.LimitReached][0])
    assert limited.data == {"limit": "task_create_rate_per_principal", "maximum": 1.0, "retryAfterMs": 1500}
    assert isinstance(limited, TooManyRequests) and limited.retry_after_s == 2
    missing = transport.map_exception(REACHABLE[errors.InputCapabilityMissing][0])
    assert missing.data == {"requiredCapabilities": {"elicitation": {}}}
    foreign = transport.map_exception(errors.TaskNotFound("another owner's"))
    assert foreign.message == transport.map_exception(errors.TaskNotFound("never existed")).message


def test_params_are_parsed_before_the_handler_with_messages_that_name_the_field() -> None:
    """Our choice (CONVENTIONS.md §Errors): -32602 naming the field, never a library's text."""
    assert PageParams.parse({}) == PageParams(0)
    assert PageParams.parse({"cursor": page_cursor(40)}) == PageParams(40)
    assert CallToolParams.parse({"name": "greet"}) == CallToolParams("greet", {})
    assert ReadResourceParams.parse({"uri": "mcptasks://artifacts/x/y"}).uri == "mcptasks://artifacts/x/y"
    assert ListenParams.parse({"notifications": {}}) == ListenParams({})
    assert InitializeParams.parse({"protocolVersion": 7}) == InitializeParams(None)
    assert validated(TaskRequestParams)({"taskId": "t1"}).task_id == "t1"
    for parse, params, field in (
        (PageParams.parse, {"cursor": 3}, "cursor"),
        (PageParams.parse, {"cursor": "not base64 at all!"}, "cursor"),
        (PageParams.parse, {"cursor": page_cursor(-1)}, "cursor"),
        (CallToolParams.parse, {"arguments": {}}, "params.name"),
        (CallToolParams.parse, {"name": "greet", "arguments": [1]}, "params.arguments"),
        (ReadResourceParams.parse, {"uri": ""}, "params.uri"),
        (ListenParams.parse, {"notifications": []}, "params.notifications"),
        (validated(TaskRequestParams), {"taskId": ""}, "taskId"),
        (validated(TaskRequestParams), {}, "taskId"),
    ):
        with pytest.raises(InvalidParams) as refused:
            parse(params)
        assert field in refused.value.message, (params, refused.value.message)
