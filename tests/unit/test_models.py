"""Wire models of the tasks extension round-trip the spec's own examples (ext-tasks `tasks.md`)."""

from __future__ import annotations

from mcp_tasks.protocol.models import CreateTaskResult, GetTaskResult, TaskStatus, UpdateTaskRequestParams

CREATE_EXAMPLE = {
    "resultType": "task",
    "taskId": "786512e2-9e0d-44bd-8f29-789f320fe840",
    "status": "working",
    "createdAt": "2025-11-25T10:30:00Z",
    "lastUpdatedAt": "2025-11-25T10:50:00Z",
    "ttlMs": 3600000,
    "pollIntervalMs": 5000,
}

GET_INPUT_REQUIRED_EXAMPLE = {
    "resultType": "complete",
    "taskId": "786512e2-9e0d-44bd-8f29-789f320fe840",
    "status": "input_required",
    "createdAt": "2025-11-25T10:30:00Z",
    "lastUpdatedAt": "2025-11-25T10:50:00Z",
    "ttlMs": 3600000,
    "pollIntervalMs": 5000,
    "inputRequests": {
        "name": {
            "method": "elicitation/create",
            "params": {
                "mode": "form",
                "message": "Please enter your name.",
                "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
            },
        }
    },
}


def test_create_task_result_round_trips_the_spec_example() -> None:
    assert CreateTaskResult.model_validate(CREATE_EXAMPLE).to_wire() == CREATE_EXAMPLE


def test_get_task_result_round_trips_the_spec_example() -> None:
    parsed = GetTaskResult.model_validate(GET_INPUT_REQUIRED_EXAMPLE)
    assert parsed.status is TaskStatus.INPUT_REQUIRED
    assert parsed.to_wire() == GET_INPUT_REQUIRED_EXAMPLE


def test_ttl_ms_null_means_unlimited_and_stays_on_the_wire() -> None:
    """SEP-2663 schema: `ttlMs` is required but may be null."""
    wire = CreateTaskResult.model_validate({**CREATE_EXAMPLE, "ttlMs": None}).to_wire()
    assert "ttlMs" in wire and wire["ttlMs"] is None
    assert "statusMessage" not in wire


def test_update_params_keep_responses_as_sent() -> None:
    params = UpdateTaskRequestParams.model_validate(
        {"taskId": "t", "inputResponses": {"name": {"action": "accept", "content": {"input": "Luca"}}}}
    )
    assert params.input_responses["name"]["content"] == {"input": "Luca"}
