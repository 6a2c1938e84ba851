"""Per-task worker credentials, and the worker API's view of a task running in a pod.

The operator keeps one random key in a Secret (`mcptasks-operator-key`, created on first start and
shared by every replica). A task's worker token is HMAC(key, taskId): the operator writes it into a
Secret owned by the McpTask, the Job passes it to the pod, and any replica can verify it without
remembering anything, also after a restart. A token authorizes exactly one task.
"""

from __future__ import annotations

import base64
import hmac
import logging
import secrets
from typing import Any, Final, cast

from kubernetes_asyncio.client import ApiClient, CoreV1Api
from kubernetes_asyncio.client.exceptions import ApiException

from mcp_tasks.operator.jobs import worker_token
from mcp_tasks.tasks.errors import TaskNotFound
from mcp_tasks.tasks.interfaces import TaskStore, ToolCatalog
from mcp_tasks.worker.executions import Execution

logger = logging.getLogger("mcp_tasks.operator")

KEY_SECRET: Final = "mcptasks-operator-key"
KEY_FIELD: Final = "worker-key"


async def load_or_create_key(api: ApiClient, namespace: str) -> bytes:
    """The operator key from its Secret, creating the Secret (32 random bytes) if it does not exist.

    Two replicas starting at once both try to create it; the loser of the 409 reads the winner's key.

    Raises:
        ApiException: the Secret cannot be read or created (RBAC: get/create secrets in the namespace).
    """
    core = CoreV1Api(api)
    try:
        secret = await core.read_namespaced_secret(KEY_SECRET, namespace)
        return base64.b64decode(secret.data[KEY_FIELD])
    except ApiException as exc:
        if exc.status != 404:
            raise
    key = secrets.token_bytes(32)
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": KEY_SECRET, "labels": {"app.kubernetes.io/managed-by": "mcp-tasks"}},
        "type": "Opaque",
        "data": {KEY_FIELD: base64.b64encode(key).decode()},
    }
    try:
        await core.create_namespaced_secret(namespace, cast(Any, body))  # a plain dict is sent as is
        logger.info("created the worker key Secret %s/%s", namespace, KEY_SECRET)
        return key
    except ApiException as exc:
        if exc.status != 409:
            raise
    secret = await core.read_namespaced_secret(KEY_SECRET, namespace)
    return base64.b64decode(secret.data[KEY_FIELD])


class TaskExecutions:
    """`ExecutionLookup` for pods: the execution id is the taskId, the token its HMAC credential.

    Args:
        key: the operator key.
        store: the McpTask store (the execution's arguments and pre-task answers come from the task).
        catalog: the McpTools.
    """

    def __init__(self, key: bytes, store: TaskStore, catalog: ToolCatalog) -> None:
        self._key = key
        self.store = store
        self.catalog = catalog

    def token_for(self, task_id: str) -> str:
        """The worker token of `task_id`."""
        return worker_token(self._key, task_id)

    async def resolve(self, execution_id: str, token: str) -> Execution | None:
        """The task's execution when `token` is its credential, else `None` (unknown and unauthorized look alike)."""
        if not hmac.compare_digest(token.encode(), self.token_for(execution_id).encode()):
            return None
        try:
            record = await self.store.get(execution_id)
        except TaskNotFound:
            return None
        return Execution(
            tool=self.catalog.get_tool(record.tool),
            arguments=record.arguments,
            task_id=record.task_id,
            attempt=max(record.attempt, 1),  # counted by the operator when it creates a Job
            pre_input_responses=dict(record.pre_input_responses),
            execution_id=execution_id,
            token=token,
            traceparent=record.traceparent,
        )
