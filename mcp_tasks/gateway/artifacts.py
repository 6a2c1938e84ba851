"""`resources/read` for artifacts: a large task result, served to the task's owner only."""

from __future__ import annotations

import base64

from mcp_tasks.gateway.context import RequestContext
from mcp_tasks.protocol.errors import InvalidParams, JsonObject
from mcp_tasks.protocol.params import ReadResourceParams
from mcp_tasks.tasks.errors import TaskNotFound
from mcp_tasks.tasks.results import parse_artifact_uri


def _not_found(uri: str) -> InvalidParams:
    return InvalidParams("Resource not found", {"uri": uri})


async def read_resource(ctx: RequestContext, params: ReadResourceParams) -> JsonObject:
    """Serve `mcptasks://artifacts/<taskId>/<name>` to the owner of that task; anything else is -32602 (SEP-2164)."""
    uri = params.uri
    parsed = parse_artifact_uri(uri)
    if parsed is None:
        raise _not_found(uri)
    task_id, name = parsed
    try:
        await ctx.services.store.get(task_id, ctx.owner)
    except TaskNotFound as exc:
        raise _not_found(uri) from exc
    artifact = await ctx.services.artifacts.get(task_id, name)
    if artifact is None:
        raise _not_found(uri)
    content: JsonObject = {"uri": uri, "mimeType": artifact.mime_type}
    if artifact.mime_type.startswith("text/") or artifact.mime_type == "application/json":
        content["text"] = artifact.data.decode("utf-8", "replace")
    else:
        content["blob"] = base64.b64encode(artifact.data).decode()
    return ctx.complete({"contents": [content], "ttlMs": 0, "cacheScope": "private"})
