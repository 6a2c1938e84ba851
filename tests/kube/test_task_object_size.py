"""What a retained McpTask keeps, on the real API server: no field ownership, no condition repeating status."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from kubernetes_asyncio.client import ApiClient, CustomObjectsApi

from mcp_tasks.protocol.models import TaskStatus
from mcp_tasks.store.kubernetes import KubernetesTaskStore
from mcp_tasks.store.kubernetes.resources import GROUP, TASK_PLURAL, VERSION
from mcp_tasks.tasks import transitions
from mcp_tasks.tasks.ids import mint_task_id
from mcp_tasks.tasks.interfaces import Writer, transact, utc_now
from mcp_tasks.tasks.owner import Owner
from mcp_tasks.tasks.record import TaskRecord

MAX_MANAGED_FIELDS_ENTRIES = 0
"""managedFields entries a task keeps once its first write went through (the create's own are reset)."""

ELICIT: dict[str, Any] = {"method": "elicitation/create", "params": {"message": "Sure?", "requestedSchema": {}}}
RESULT: dict[str, Any] = {"content": [{"type": "text", "text": "x" * 1000}], "isError": False}


def _new_record() -> TaskRecord:
    now = utc_now()
    return TaskRecord(
        task_id=mint_task_id(),
        owner=Owner("acme", "alice", "static"),
        tool="asker",
        arguments={"seconds": 1},
        status=TaskStatus.WORKING,
        created_at=now,
        last_updated_at=now,
        ttl_ms=60_000,
        poll_interval_ms=100,
        client_capabilities={"elicitation": {"form": {}}},
    )


async def _stored(api_client: ApiClient, namespace: str, name: str) -> dict[str, Any]:
    got: dict[str, Any] = await CustomObjectsApi(api_client).get_namespaced_custom_object(
        GROUP, VERSION, namespace, TASK_PLURAL, name
    )
    return got


async def test_a_task_through_its_whole_life_keeps_no_field_ownership_and_no_repeated_messages(
    api_client: ApiClient, namespace: str
) -> None:
    """Create (the API server records ownership), claim, progress, an input round answered by the client,
    renew, complete with a 1 kB result: each write through the store as its writer makes it. The object
    keeps at most `MAX_MANAGED_FIELDS_ENTRIES` managedFields entries after every write, and the finished
    one's conditions repeat nothing its status says."""
    store = KubernetesTaskStore(api_client, namespace)
    await store.open()
    try:
        record = await store.create(_new_record())
        created = await _stored(api_client, namespace, record.task_id)
        assert created["metadata"]["managedFields"], "the API server records the creator's fields"
        lease = timedelta(seconds=30)
        steps = [
            (lambda r: (transitions.claim(r, "op-0", utc_now(), lease, 60_000), None), Writer.EXECUTOR),
            (lambda r: (transitions.report_progress(r, 1, 3, None, utc_now()), None), Writer.EXECUTOR),
            (lambda r: (transitions.add_input_requests(r, [("ok", ELICIT)], utc_now())[0], None), Writer.EXECUTOR),
            (
                lambda r: (transitions.answer_input_requests(r, {"ok": {"action": "decline"}}, utc_now()), None),
                Writer.CLIENT,
            ),
            (lambda r: (transitions.take_input_responses(r, ["ok"])[0], None), Writer.EXECUTOR),
            (lambda r: (transitions.renew(r, "op-0", utc_now(), lease, 60_000), None), Writer.EXECUTOR),
            (lambda r: (transitions.complete(r, dict(RESULT), utc_now()), None), Writer.EXECUTOR),
        ]
        for change, writer in steps:
            await transact(store, record.task_id, change, writer)
            stored = await _stored(api_client, namespace, record.task_id)
            assert len(stored["metadata"].get("managedFields") or []) <= MAX_MANAGED_FIELDS_ENTRIES, stored["metadata"]
        assert stored["status"]["taskStatus"] == "completed" and stored["status"]["statusMessage"] == "Completed"
        assert stored["status"]["result"]["content"] == RESULT["content"]
        (condition,) = stored["status"]["conditions"]  # a finished task's conditions: Finished alone
        assert condition["type"] == "Finished" and condition["status"] == "True", condition
        assert "message" not in condition and condition["observedGeneration"] >= 1, condition
        assert "inputRequests" not in stored["status"], "nothing pending: left out, not stored empty"
        assert stored["status"]["issuedInputKeys"] == ["ok"] and "preInputResponses" not in stored["spec"]
        assert "app.kubernetes.io/managed-by" not in stored["metadata"]["labels"]
        finished = await store.get(record.task_id, fresh=True)
        assert finished.status is TaskStatus.COMPLETED and finished.result is not None
    finally:
        await store.aclose()


async def test_an_object_written_by_the_previous_version_is_read_and_compacted_at_its_next_write(
    api_client: ApiClient, namespace: str
) -> None:
    """An upgrade finds live tasks with ownership, condition messages and empty fields: they read as before,
    the next write (a status write) leaves them without ownership or messages, and a client's write of the
    spec (a cancel) is admitted by the CRD's rules although it leaves the empty fields out."""
    store = KubernetesTaskStore(api_client, namespace)
    await store.open()
    try:
        record = await store.create(_new_record())
        old = await _stored(api_client, namespace, record.task_id)
        old["spec"].update(inputResponses={}, preInputResponses={})  # as the previous version stored them
        old = await CustomObjectsApi(api_client).replace_namespaced_custom_object(
            GROUP, VERSION, namespace, TASK_PLURAL, record.task_id, old, field_manager="OpenAPI-Generator"
        )
        assert old["spec"]["preInputResponses"] == {}
        old["status"] = {
            "taskStatus": "working",
            "statusMessage": "halfway",
            "attempt": 1,
            "lastUpdatedAt": old["spec"]["createdAt"],
            "conditions": [
                {
                    "type": "Started",
                    "status": "True",
                    "reason": "RunStarted",
                    "message": "run 1 of the tool began",
                    "lastTransitionTime": old["spec"]["createdAt"],
                    "observedGeneration": 1,
                }
            ],
        }
        await CustomObjectsApi(api_client).replace_namespaced_custom_object_status(
            GROUP, VERSION, namespace, TASK_PLURAL, record.task_id, old, field_manager="OpenAPI-Generator"
        )
        previous = await _stored(api_client, namespace, record.task_id)
        assert len(previous["metadata"]["managedFields"]) == 2, "as the previous version left them: main and status"
        read = await store.get(record.task_id, fresh=True)
        assert read.status_message == "halfway" and read.attempt == 1
        await transact(
            store,
            record.task_id,
            lambda r: (transitions.report_progress(r, 2, 3, None, utc_now()), None),
            Writer.EXECUTOR,
        )
        stored = await _stored(api_client, namespace, record.task_id)
        assert "managedFields" not in stored["metadata"]
        assert all("message" not in condition for condition in stored["status"]["conditions"])
        started = next(c for c in stored["status"]["conditions"] if c["type"] == "Started")
        assert started["lastTransitionTime"] == old["spec"]["createdAt"], "an unchanged condition keeps its time"
        await transact(
            store, record.task_id, lambda r: (transitions.request_cancel(r, "alice", utc_now()), None), Writer.CLIENT
        )
        spec = (await _stored(api_client, namespace, record.task_id))["spec"]
        assert spec["cancelRequested"] is True and "preInputResponses" not in spec, spec
    finally:
        await store.aclose()
