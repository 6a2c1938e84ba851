"""The operator writes each McpTool's `status.conditions`: `Valid`, and why not (Kubernetes API conventions).

Level-based: after every change of the McpTool catalog, each McpTool whose `Valid` condition differs
from the catalog's verdict (`KubernetesToolCatalog.verdicts`) gets one merge patch of its status
subresource; an unchanged one gets none, so the watch event of our own write changes nothing. Two
operator replicas write the same content. `lastTransitionTime` moves only when the status changes.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any, Final

from kubernetes_asyncio.client import ApiClient

from mcp_tasks.store.kubernetes import client
from mcp_tasks.store.kubernetes.catalog import KubernetesToolCatalog, ToolVerdict
from mcp_tasks.store.kubernetes.resources import GROUP, TOOL_PLURAL, VERSION

logger = logging.getLogger("mcp_tasks.operator")

CONDITION_VALID: Final = "Valid"
MERGE_PATCH: Final[dict[str, Any]] = {"_content_type": "application/merge-patch+json"}
"""Request option for a JSON merge patch (the generated client would send a JSON Patch for a dict)."""
MESSAGE_LIMIT: Final = 1000


def valid_condition(verdict: ToolVerdict, now: datetime) -> dict[str, Any]:
    """The `Valid` condition for `verdict`, keeping `lastTransitionTime` when its status is unchanged."""
    status = "True" if verdict.valid else "False"
    old = next((c for c in verdict.conditions if c.get("type") == CONDITION_VALID), None)
    since = old["lastTransitionTime"] if old is not None and old.get("status") == status else None
    message = " ".join(verdict.message.split())
    return {
        "type": CONDITION_VALID,
        "status": status,
        "reason": verdict.reason,
        "message": message if len(message) <= MESSAGE_LIMIT else message[: MESSAGE_LIMIT - 1] + "…",
        "lastTransitionTime": since or now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "observedGeneration": verdict.generation,
    }


def needs_write(verdict: ToolVerdict, condition: dict[str, Any]) -> bool:
    """True when the McpTool's current `Valid` condition is not `condition` (ignoring nothing)."""
    old = next((c for c in verdict.conditions if c.get("type") == CONDITION_VALID), None)
    return old != condition


async def write_tool_statuses(api: ApiClient, namespace: str, catalog: KubernetesToolCatalog) -> None:
    """Run until cancelled: after each catalog change, patch the McpTools whose condition changed."""
    objects = client.Apis(api).objects
    while True:
        await catalog.changed.wait()
        catalog.changed.clear()
        now = datetime.now(UTC)
        for name, verdict in list(catalog.verdicts().items()):
            condition = valid_condition(verdict, now)
            if not needs_write(verdict, condition):
                continue
            body = {"status": {"conditions": [condition]}}
            try:
                await client.call(
                    objects.patch_namespaced_custom_object_status,
                    GROUP,
                    VERSION,
                    namespace,
                    TOOL_PLURAL,
                    name,
                    body,
                    **MERGE_PATCH,
                )
            except client.NotFound:
                pass  # deleted meanwhile: nothing to report on
            except Exception as exc:  # the API server is away: the next change (or relist) retries
                logger.warning("mcptool/%s: could not write its Valid condition: %s", name, exc)
        await asyncio.sleep(0)
