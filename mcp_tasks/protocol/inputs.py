"""Validation of input responses against the input request they answer (SEP-2322 `InputResponse`).

An answer to `elicitation/create` must be an `ElicitResult` (`{action, content?}`) whose accepted
`content` gives each field the type the request's `requestedSchema` asks (form mode), to `sampling/createMessage` a
`CreateMessageResult`, to `roots/list` a `ListRootsResult`. Used by `tasks/update` and the input rounds, so
a malformed answer is refused instead of consuming the pending request. No I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from mcp_types import CreateMessageResult, ElicitResult, ListRootsResult
from pydantic import BaseModel, ValidationError
from referencing import Registry
from referencing.exceptions import Unresolvable

from mcp_tasks.protocol import constants

_RESPONSE_MODELS: Final[dict[str, type[BaseModel]]] = {
    constants.METHOD_ELICIT: ElicitResult,
    constants.METHOD_SAMPLING: CreateMessageResult,
    constants.METHOD_ROOTS_LIST: ListRootsResult,
}


def response_problem(request: Mapping[str, Any], response: Any) -> str | None:
    """Why `response` cannot answer `request` (`{method, params}`), or `None` when it can.

    For a form-mode `elicitation/create` answered `accept`, each field of `content` must match its
    property in the request's `requestedSchema` (MCP `client/elicitation`: content conforms to it). Missing
    `required` fields are left to the tool: SEP-2663's own example flow answers `{"input": ...}` to a form
    that asks for `name`, and clients copy it. A request whose schema cannot be checked is not held
    against the answer.
    """
    method = str(request.get("method"))
    model = _RESPONSE_MODELS.get(method)
    if model is None:
        return None
    if not isinstance(response, dict):
        return f"must be a {model.__name__} object"
    try:
        model.model_validate(response)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(root)"
        return f"is not a valid {model.__name__}: {where}: {first['msg']}"
    if method == constants.METHOD_ELICIT and response.get("action") == "accept":
        return _content_problem(request.get("params"), response.get("content"))
    return None


def _content_problem(params: Any, content: Any) -> str | None:
    """Why an accepted elicitation's `content` does not match the form's `requestedSchema`, or `None`."""
    params = params if isinstance(params, dict) else {}
    schema = params.get("requestedSchema")
    if params.get("mode", "form") != "form" or not isinstance(schema, dict):
        return None
    properties_only = {key: value for key, value in schema.items() if key != "required"}
    try:
        Draft202012Validator.check_schema(properties_only)
    except SchemaError:
        return None
    validator = Draft202012Validator(properties_only, registry=Registry())  # no retrieval: a URL $ref is never fetched
    try:
        error = next(iter(validator.iter_errors(content if content is not None else {})), None)
    except Unresolvable:
        return None
    if error is None:
        return None
    where = "/".join(str(part) for part in error.absolute_path) or "(root)"
    return f"content does not match the request's requestedSchema at {where}: {error.message[:200]}"
