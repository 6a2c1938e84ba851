"""What the API server's refusal of a tool's Job means for its task. Pure.

Who calls it: the reconciler (`Reconciler._create_job`) when `create_namespaced_job` is refused. It never
talks to the API server and never writes the task; it only reads the refusal (status and `Status.message`).

- **Quota** (403 Forbidden whose message says `exceeded quota`: a ResourceQuota counting Jobs, e.g.
  `count/jobs.batch`): the refusal may lift by itself once other Jobs end, so the task waits, with the
  quota's message as its `statusMessage` and a Warning Event, until the operator's start deadline.
- **Refused** (any other 403: an admission policy such as the chart's ValidatingAdmissionPolicy, an
  admission webhook, or RBAC; 422 Invalid: the Job fails validation): retrying the same Job cannot
  succeed, so the task fails (`data.reason` `JobRefused`) with the API server's message and what to do.
- Anything else (another 4xx): not judged here; the reconciler retries with back-off as before.

Kubernetes API conventions: admission (quota, policies, webhooks) answers 403 `Forbidden`, validation
422 `Invalid`; only the message tells a quota apart from a policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from mcp_tasks.store.kubernetes import client

QUOTA_MARK: Final = "exceeded quota"
"""What the ResourceQuota admission plugin's 403 message says (`... is forbidden: exceeded quota: <name>, ...`)."""
OPERATOR_POLICY_MARK: Final = "-operator-writes'"
"""The end of the chart's ValidatingAdmissionPolicy name, as the API server quotes it in a refusal."""
REFUSED_REASON: Final = "JobRefused"
"""`error.data.reason` (and the Event's reason) of a task whose Job the API server refused for good."""
QUOTA_REASON: Final = "QuotaExceeded"
"""The Warning Event's reason while a task waits for a ResourceQuota to admit its Job."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """A judged refusal of a tool's Job.

    Attributes:
        kind: `quota` (wait and retry until the start deadline) or `refused` (fail the task now).
        message: the sentence for the task's `statusMessage` / error and the Event's note: what the API
            server said (quoted) and what to do.
        said: the API server's own message (its `Status.message`, at most `client.MESSAGE_LIMIT` characters).
    """

    kind: Literal["quota", "refused"]
    message: str
    said: str


def judge(error: client.ApiError, tool: str, account: str) -> Refusal | None:
    """What the refusal `error` of tool `tool`'s Job means; `None` when it is neither an admission nor a
    validation refusal (retry with back-off).

    Args:
        error: the mapped API error of the Job create (`client.ApiError`; 409 never reaches here).
        tool: the tool's name, for the message.
        account: the ServiceAccount the Job's pods run as (`spec.template.spec.serviceAccountName`).
    """
    said = error.message or f"{error.status} {error.reason}"
    if isinstance(error, client.Invalid):
        return Refusal(
            "refused",
            f"The API server refused tool {tool!r}'s Job as invalid ({said}); fix the McpTool's `container` and "
            "call the tool again",
            said,
        )
    if error.status != 403:
        return None
    if QUOTA_MARK in said:
        return Refusal(
            "quota",
            f"Waiting for quota: a ResourceQuota of the namespace refused tool {tool!r}'s Job ({said}); it is "
            "retried until the operator's start deadline, so free the quota (other Jobs ending) or raise it",
            said,
        )
    if OPERATOR_POLICY_MARK in said:
        return Refusal(
            "refused",
            f"The operator's admission policy refused tool {tool!r}'s Job ({said}); if its pods may run as "
            f"ServiceAccount {account!r}, add it to the chart value operator.admissionPolicy.toolServiceAccounts, "
            "else change the McpTool's container.serviceAccountName",
            said,
        )
    return Refusal(
        "refused",
        f"The API server refused tool {tool!r}'s Job ({said}); an admission policy, webhook or the operator's "
        "RBAC forbids it: ask the cluster's administrators, or change the McpTool",
        said,
    )


def quota_timeout(waiting: Refusal, start_deadline_s: float) -> str:
    """The failure message of a task whose Job a quota refused until the start deadline (`StartTimeout`)."""
    return (
        f"The tool's Job could not be created within {start_deadline_s:g}s: a ResourceQuota of the namespace "
        f"refused it ({waiting.said}); free or raise the quota, then call the tool again"
    )
