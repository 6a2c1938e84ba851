"""Validation of input responses against the input request they answer (SEP-2322 `InputResponse`).

An answer to `elicitation/create` must be an `ElicitResult` (`{action, content?}`), to
`sampling/createMessage` a `CreateMessageResult`, to `roots/list` a `ListRootsResult`. Used by
`tasks/update`, so a malformed answer is refused instead of consuming the pending request. No I/O.
"""

from __future__ import annotations

from typing import Any, Final

from mcp_types import CreateMessageResult, ElicitResult, ListRootsResult
from pydantic import BaseModel, ValidationError

from mcp_tasks.protocol import constants

_RESPONSE_MODELS: Final[dict[str, type[BaseModel]]] = {
    constants.METHOD_ELICIT: ElicitResult,
    constants.METHOD_SAMPLING: CreateMessageResult,
    constants.METHOD_ROOTS_LIST: ListRootsResult,
}


def response_problem(method: str, response: Any) -> str | None:
    """Why `response` cannot answer a `method` input request, or `None` when it can."""
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
    return None
