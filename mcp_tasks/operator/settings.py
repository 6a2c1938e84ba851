"""Settings of the operator (group `operator` of the CLI's `Settings`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mcp_tasks.operator import kueue
from mcp_tasks.operator.kueue import QueueNames
from mcp_tasks.tasks.pod_shape import ToolDefaults


@dataclass(frozen=True, slots=True)
class OperatorSettings:
    """How the operator runs McpTasks as Jobs.

    Attributes:
        worker_url: base URL at which pods reach the operator's worker API, e.g.
            `http://mcptasks-operator.mcp-tasks.svc:8081` (the Service in front of the operator);
            `None` means `http://127.0.0.1:<worker_port>` (pods on this machine only: the test process node).
        worker_host: address the worker API binds (default all interfaces).
        worker_port: port of the worker API (default 8081).
        worker_tls_cert_file: PEM certificate (chain) the worker API serves HTTPS with (the chart mounts the
            `tls.crt` of `tls.workerApi.secretName` or of its cert-manager Certificate); `None` (the default):
            plain HTTP. Projected ServiceAccount tokens travel on this connection. Needs `worker_tls_key_file`.
        worker_tls_key_file: PEM private key of `worker_tls_cert_file`.
        worker_ca_secret: Secret of the namespace whose `ca.crt` tool pods mount (beside their worker token,
            `MCPTASKS_WORKER_CA_FILE`) to verify the worker API's certificate; `None`: tool pods trust their
            image's CA bundle only. Only that key is mounted, never the private key.
        warm_tls_secret: `kubernetes.io/tls` Secret of the namespace whose `tls.crt` and `tls.key` warm tools' pods
            serve their calls with over HTTPS (the chart's `tls.warmWorkers.secretName`; a certificate of its own,
            never the worker API's: a tool image holds this key). `None`: warm pods serve plain HTTP.
        start_deadline_s: a pod that has not started this long after its Job was created (image cannot
            be pulled, unschedulable) fails its task, in seconds (default 300).
        job_ttl_after_finished_s: `ttlSecondsAfterFinished` of each Job, in seconds (default 600); the
            McpTask's own expiry removes it earlier through the owner reference.
        idempotent_retries: `backoffLimit` for tools declared idempotent (others get 0: never re-run).
        sweep_interval_s: how often expired tasks are deleted and the task gauges refreshed, in seconds.
        resync_interval_s: how often every unfinished task is reconciled even without an event, in seconds
            (default 300). Deadlines do not wait for it: each is a delayed reconcile of its task.
        reconcile_workers: how many tasks are reconciled at once (default 8).
        service_account: service account of tool pods (default: the namespace's `default`). Its default
            token is not mounted (`automountServiceAccountToken` off); the pod gets only the projected
            worker token (audience `mcp-tasks-worker`) it proves its task with, so it needs no permissions.
        inline_result_max_bytes: largest result kept inline in the McpTask, in bytes (default 256 KiB);
            larger results become artifacts and the task carries a `resource_link`.
        artifact_max_bytes: largest result accepted at all, in bytes (default 64 MiB).
        leader_lease: name of the `coordination.k8s.io/v1` Lease the operator replicas of one namespace
            elect their leader with (the one that reconciles). The chart's Role grants this default
            name only: one leader per namespace, whatever the release.
        leader_lease_duration_s: `leaseDurationSeconds` of that Lease: how long standbys wait, after the
            leader's last renew they saw, before one takes over, in whole seconds (default 15, as
            client-go's). A leader that stops gracefully releases it, so a standby takes over at once.
        leader_renew_deadline_s: how long the leader keeps acting without a confirmed renew, in seconds
            (default 10; less than the lease duration, so it stops before anyone may take over).
        leader_retry_period_s: how often every replica reads (the leader: renews) the Lease, in seconds
            (default 2; less than the renew deadline).
        instance: value of the `app.kubernetes.io/instance` label on tool Jobs and Pods (the Helm release
            name, so the release's NetworkPolicy admits them to the worker API); `None`: no such label.
        bridge_image: the image of the bridge container beside each McpServer's server in its per-call pods
            (the project's own image, `python -m mcp_tasks.bridge`; the chart sets it to its `image`). `None`:
            McpServer tools cannot run on Kubernetes (their tasks fail at once, naming this setting).
        tool_defaults: the release's defaults of every tool's pod shape, as JSON (the chart's `toolDefaults`):
            `resources`, `nodeSelector`, `tolerations`, `imagePullSecrets`, `affinity`, `runtimeClassName`,
            `priorityClassName`, merged under each McpTool's own `spec.container` values (the tool's value
            wins; docs/kubernetes.md §2). Applied to Jobs and warm Deployments alike. Default none.
        max_running_tasks: tasks the operator runs at once, Jobs and warm calls together (a Job counts from
            its creation until its pod ends); a task over it waits `working`, its `statusMessage` saying so,
            and the next free slot goes to the tenant furthest below its share (`tasks.fair_share`). The
            running budgets of the `limits` group (`MCPTASKS_MAX_RUNNING_PER_TENANT`, ...) apply within it.
            Default 0: no cap (the namespace's ResourceQuota is then the only one).
        kueue_enabled: leave the admission of Jobs to Kueue (https://kueue.sigs.k8s.io; installed in the
            cluster, with LocalQueues in this namespace): a task mapped to a LocalQueue (below) gets its Job
            created suspended with the label `kueue.x-k8s.io/queue-name`, and Kueue starts it; such Jobs
            count against Kueue's quotas, not `max_running_tasks` nor the running budgets. Default off.
        kueue_queue_name: the LocalQueue of a task whose tool and tenant are not mapped below; empty (the
            default): such tasks are admitted by the operator itself.
        kueue_tenant_queues: tenant → LocalQueue, as a JSON object (e.g. `{"team-a": "team-a"}`): one
            queue per tenant lets Kueue's fair sharing between ClusterQueues hold between tenants. Default
            none.
        kueue_tool_queues: tool name → LocalQueue, as a JSON object (e.g. `{"render": "gpu"}`); a tool's
            queue wins over its tenant's. Default none.
    """

    worker_url: str | None = None
    worker_host: str = "0.0.0.0"  # pods reach it through the cluster network
    worker_port: int = 8081
    worker_tls_cert_file: Path | None = None
    worker_tls_key_file: Path | None = None
    worker_ca_secret: str | None = None
    warm_tls_secret: str | None = None
    start_deadline_s: float = 300.0
    job_ttl_after_finished_s: int = 600
    idempotent_retries: int = 2
    sweep_interval_s: float = 10.0
    resync_interval_s: float = 300.0
    reconcile_workers: int = 8
    service_account: str | None = None
    inline_result_max_bytes: int = 256 * 1024
    artifact_max_bytes: int = 64 * 1024 * 1024
    leader_lease: str = "mcp-tasks-operator"
    leader_lease_duration_s: int = 15
    leader_renew_deadline_s: float = 10.0
    leader_retry_period_s: float = 2.0
    instance: str | None = None
    bridge_image: str | None = None
    tool_defaults: ToolDefaults | None = None
    max_running_tasks: int = 0
    kueue_enabled: bool = False
    kueue_queue_name: str = ""
    kueue_tenant_queues: QueueNames = field(default_factory=QueueNames)
    kueue_tool_queues: QueueNames = field(default_factory=QueueNames)

    def kueue_queue(self, tool: str, tenant: str) -> str | None:
        """The LocalQueue a task of `tool` owned by `tenant` goes to, or `None` (Kueue off, or not mapped)."""
        if not self.kueue_enabled:
            return None
        return kueue.queue_for(tool, tenant, self.kueue_queue_name, self.kueue_tool_queues, self.kueue_tenant_queues)

    @property
    def pod_worker_url(self) -> str:
        """The worker API's base URL as pods see it."""
        scheme = "http" if self.worker_tls_cert_file is None else "https"
        return self.worker_url or f"{scheme}://127.0.0.1:{self.worker_port}"
