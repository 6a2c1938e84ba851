"""Which answers fit an input request (`protocol/inputs.py`): the method's result type, and for an accepted
form question the types of the fields the form asks for. A missing required field is the tool's to judge:
SEP-2663's own example flow answers `{"input": ...}` to a form that asks for `name`."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_tasks.protocol.inputs import response_problem
from mcp_tasks.runtime import content

FORM = content.form_request("Your name?", {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}})


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        ({"action": "accept", "content": {"name": "Ada", "age": 36}}, None),
        ({"action": "accept", "content": {"input": "Luca"}}, None),
        ({"action": "decline"}, None),
        ({"action": "accept", "content": {"name": 5}}, "at name: 5 is not of type 'string'"),
        ({"action": "accept", "content": {"name": "Ada", "age": -1}}, "at age: -1 is less than the minimum of 0"),
        ({"action": "maybe"}, "is not a valid ElicitResult"),
        ("accept", "must be a ElicitResult object"),
    ],
)
def test_an_answer_to_a_form_question_fits_its_result_type_and_its_fields_types(
    answer: Any, problem: str | None
) -> None:
    found = response_problem(FORM, answer)
    assert (found is None) if problem is None else (found is not None and problem in found), found


def test_a_url_question_and_a_form_whose_schema_cannot_be_read_take_any_accepted_content() -> None:
    url = content.url_request("Sign in", "https://example.com", "e1")
    assert response_problem(url, {"action": "accept", "content": {"x": 1}}) is None
    broken = {"method": "elicitation/create", "params": {"message": "?", "requestedSchema": {"type": 7}}}
    assert response_problem(broken, {"action": "accept", "content": {"x": 1}}) is None
