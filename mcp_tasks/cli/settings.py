"""`Settings`: every knob of `mcptasks serve`, grouped by concern, loaded and validated once.

Sources, later winning: defaults → environment (`MCPTASKS_*`) → command-line flags. Bad values fail
at start-up naming the flag or variable. Below `cli` nothing reads the environment.

The tree describes itself: each group is a dataclass whose docstring documents every field (meaning,
unit, default, why), every field has an environment variable derived from its name (`setting_fields`),
and `mcptasks settings` prints the table that docs/configuration.md holds (a test keeps them equal).
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Final

from mcp_tasks.gateway.identity.oidc import check_issuer_url
from mcp_tasks.gateway.identity.settings import AuthSettings
from mcp_tasks.gateway.identity.tenants import TenantPolicy
from mcp_tasks.gateway.settings import GatewaySettings
from mcp_tasks.operator import kueue
from mcp_tasks.operator.settings import OperatorSettings
from mcp_tasks.runner.runner import RunnerSettings
from mcp_tasks.store.settings import ArtifactSettings
from mcp_tasks.tasks import limits, pod_shape
from mcp_tasks.tasks.limits import LimitSettings
from mcp_tasks.tasks.owner import LOCAL_ISSUER, SERVICE_ACCOUNT_ISSUER, STATIC_ISSUER, legacy_issuer


class SettingsError(ValueError):
    """A setting is invalid; the message names the flag and the environment variable."""


@dataclass(frozen=True, slots=True)
class ServeSettings:
    """Where and how `mcptasks serve` listens and keeps its data.

    Attributes:
        host: bind address (default 127.0.0.1). Non-loopback needs `tokens_file`.
        port: TCP port (default 8000; 0 picks a free one).
        tools_dirs: folders of McpTool manifests (default `examples/tools` if present).
        data_dir: folder for the SQLite database, artifacts and the requestState key (default `.data`).
        tokens_file: YAML bearer-token file; without it one local principal, loopback only.
        warm_call_key_file: the Ed25519 private key (PKCS#8 PEM) that signs the offers opening the sessions
            warm calls are keyed with (every call, re-attach and cancel a warm worker takes); it must exist.
            Default: none, then `warm-call.key` in the data folder, created (mode 0600) if absent and kept
            across restarts so a restarted server can re-attach to its warm calls. The chart sets it to the
            operator's Secret, mounted in the operator and gateway pods only. Never the requestState key.
        log_level: Python logging level name (default INFO).
        log_json: log one JSON object per line instead of text.
        metrics_port: port of the Prometheus `/metrics` endpoint of `serve`, `gateway` and `operator`
            (default 0: off). Bound on `host` (the operator: on `worker_host`), apart from the MCP port so
            that scraping needs no MCP credentials and is not exposed where MCP is. The chart sets 9464.
    """

    host: str = "127.0.0.1"
    port: int = 8000
    tools_dirs: tuple[Path, ...] = ()
    data_dir: Path = Path(".data")
    tokens_file: Path | None = None
    warm_call_key_file: Path | None = None
    log_level: str = "INFO"
    log_json: bool = False
    metrics_port: int = 0

    @property
    def loopback(self) -> bool:
        """True when `host` is a loopback address or `localhost`."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


@dataclass(frozen=True, slots=True)
class KubernetesSettings:
    """Where `mcptasks gateway` finds its cluster (group `kubernetes` of `Settings`).

    Attributes:
        kubeconfig: kubeconfig file; `None` means in-cluster config when running in a pod, else
            `$KUBECONFIG` or `~/.kube/config`.
        context: kubeconfig context (default: the current one).
        namespace: namespace of the McpTasks and McpTools (default: the pod's namespace in-cluster,
            else the context's namespace, else `default`).
        runner: `none` (tasks are run by the operator) or `local` (this process runs them as local
            processes, like `mcptasks serve`; for development and tests).
        watch_timeout_s: server-side timeout of one WATCH request, in seconds; the watch then resumes.
        cache_full_objects: finished tasks the gateway also keeps whole in its cache, the most recently
            finished or read (default 2048); every other finished task is kept as a summary of about
            1 kB, and reading its result costs one GET to the API server.
        warm_tls_ca_file: PEM CA that warm tools' pods' certificates are verified with, when they serve HTTPS
            (the chart's `tls.warmWorkers`; the gateway's synchronous calls and the operator's warm tasks);
            `None` (the default): warm pods are called over plain HTTP.
        warm_tls_server_name: the DNS name a warm pod's certificate must carry (pods are called by IP, so
            the name is checked instead of the address); default `mcp-tasks-warm-worker`.
        inline_arguments_max_bytes: largest tool argument object the gateway keeps inside an McpTask, in
            bytes of compact JSON (default 64 KiB); larger arguments are written as an artifact of the task
            and read back by the executor, so the largest argument accepted is the request body limit
            (`MCPTASKS_MAX_BODY_BYTES`), as in the embedded server.
    """

    kubeconfig: Path | None = None
    context: str | None = None
    namespace: str | None = None
    runner: str = "none"
    watch_timeout_s: int = 300
    cache_full_objects: int = 2048
    warm_tls_ca_file: Path | None = None
    warm_tls_server_name: str = "mcp-tasks-warm-worker"
    inline_arguments_max_bytes: int = 64 * 1024


@dataclass(frozen=True, slots=True)
class Settings:
    """All settings of `mcptasks serve` and `mcptasks gateway`, by group."""

    serve: ServeSettings = field(default_factory=ServeSettings)
    gateway: GatewaySettings = field(default_factory=GatewaySettings)
    runner: RunnerSettings = field(default_factory=RunnerSettings)
    kubernetes: KubernetesSettings = field(default_factory=KubernetesSettings)
    operator: OperatorSettings = field(default_factory=OperatorSettings)
    auth: AuthSettings = field(default_factory=AuthSettings)
    artifacts: ArtifactSettings = field(default_factory=ArtifactSettings)
    limits: LimitSettings = field(default_factory=LimitSettings)


# Environment variables are derived from the field names: `MCPTASKS_<FIELD>` (upper case), with these
# exceptions kept for names that would be ambiguous or were published before the derivation.
_ENV_NAMES: Final = {
    ("serve", "tools_dirs"): "MCPTASKS_TOOLS",
    ("serve", "tokens_file"): "MCPTASKS_TOKENS",
    ("kubernetes", "context"): "MCPTASKS_KUBE_CONTEXT",
    ("operator", "sweep_interval_s"): "MCPTASKS_OPERATOR_SWEEP_INTERVAL_S",
    ("operator", "resync_interval_s"): "MCPTASKS_OPERATOR_RESYNC_INTERVAL_S",
    ("operator", "service_account"): "MCPTASKS_TOOL_SERVICE_ACCOUNT",
}
# Derived at start-up, never set from outside.
_NOT_SETTABLE: Final = frozenset(
    {("gateway", "server_version"), ("gateway", "request_state_secret"), ("gateway", "loopback_only")}
)


@dataclass(frozen=True, slots=True)
class SettingField:
    """One settable field of the tree, as `mcptasks settings` lists it.

    Attributes:
        group: the `Settings` attribute holding it (`serve`, `gateway`, `runner`, `kubernetes`, `operator`,
            `auth`, `artifacts`, `limits`).
        name: the field name; its unit is its suffix (`_s` seconds, `_ms` milliseconds, `_bytes` bytes).
        variable: the environment variable that sets it. A limit shared by two groups (for example
            `inline_result_max_bytes` of the runner and of the operator) has one variable for both.
        kind: the annotation, which decides how the variable's text is parsed.
        default: the default value, as text.
        doc: the meaning, from the group's docstring (`Attributes:`), where every field is described.
    """

    group: str
    name: str
    variable: str
    kind: str
    default: str
    doc: str


def _attribute_docs(cls: type) -> dict[str, str]:
    """`name → text` of the `Attributes:` section of a Google-style class docstring."""
    docs: dict[str, str] = {}
    current = ""
    inside = False
    for line in (cls.__doc__ or "").splitlines():
        stripped = line.strip()
        if stripped == "Attributes:":
            inside = True
            continue
        if not inside or not stripped:
            continue
        head, sep, rest = stripped.partition(": ")
        if sep and head.isidentifier() and line.startswith(" " * 8) and not line.startswith(" " * 12):
            current = head
            docs[current] = rest
        elif current:
            docs[current] += " " + stripped
    return docs


def setting_fields() -> list[SettingField]:
    """Every settable field of `Settings`, in group order, with its variable, default and meaning."""
    result: list[SettingField] = []
    defaults = Settings()
    for group in fields(Settings):
        cls = type(getattr(defaults, group.name))
        docs = _attribute_docs(cls)
        for item in fields(cls):
            key = (group.name, item.name)
            if key in _NOT_SETTABLE:
                continue
            variable = _ENV_NAMES.get(key, f"MCPTASKS_{item.name.upper()}")
            value = getattr(getattr(defaults, group.name), item.name)
            default = ",".join(sorted(str(v) for v in value)) if isinstance(value, (tuple, frozenset)) else str(value)
            result.append(
                SettingField(group.name, item.name, variable, str(item.type), default, docs.get(item.name, ""))
            )
    return result


def _parse(field_: SettingField, text: str) -> object:
    kind = field_.kind
    try:
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
    except ValueError as exc:
        noun = "an integer" if kind == "int" else "a number"
        raise SettingsError(f"{field_.variable} must be {noun}, got {text!r}") from exc
    if kind == "bool":
        if text.lower() not in {"1", "true", "yes", "0", "false", "no", ""}:
            raise SettingsError(f"{field_.variable} must be true or false, got {text!r}")
        return text.lower() in {"1", "true", "yes"}
    if kind in ("Path", "Path | None"):
        return Path(text) if text else None
    if kind == "str | None":
        return text or None
    if kind == "ToolDefaults | None":
        try:
            return pod_shape.parse_defaults(text) if text.strip() else None
        except ValueError as exc:
            raise SettingsError(f"{field_.variable}: {exc}") from exc
    if kind == "QueueNames":
        try:
            return kueue.parse_queue_names(text)
        except ValueError as exc:
            raise SettingsError(f"{field_.variable}: {exc}") from exc
    if kind == "TenantOverrides":
        try:
            return limits.parse_overrides(text)
        except ValueError as exc:
            raise SettingsError(f"{field_.variable}: {exc}") from exc
    if kind == "tuple[Path, ...]":
        return tuple(Path(part) for part in text.split(os.pathsep) if part)
    if kind == "tuple[str, ...]":
        return tuple(part.strip() for part in text.split(",") if part.strip())
    if kind == "frozenset[str]":
        return frozenset(part.strip() for part in text.split(",") if part.strip())
    return text


def _set(settings: Settings, group: str, name: str, value: object) -> Settings:
    return replace(settings, **{group: replace(getattr(settings, group), **{name: value})})


def from_environment(settings: Settings, environ: Mapping[str, str]) -> Settings:
    """Apply the `MCPTASKS_*` variables of `setting_fields()` (an empty value keeps a path's default).

    Raises:
        SettingsError: a variable does not parse (the message names it).
    """
    for field_ in setting_fields():
        if field_.variable not in environ:
            continue
        value = _parse(field_, environ[field_.variable])
        if value is None and field_.kind == "Path":
            continue
        settings = _set(settings, field_.group, field_.name, value)
    return settings


def settings_table() -> str:
    """The Markdown table of every environment variable (`mcptasks settings`; docs/configuration.md)."""
    rows = ["| variable | setting | default | meaning |", "|---|---|---|---|"]
    seen: set[str] = set()
    for field_ in setting_fields():
        if field_.variable in seen:
            continue
        seen.add(field_.variable)
        default = f"`{field_.default}`" if field_.default not in ("", "None") else "none"
        rows.append(f"| `{field_.variable}` | {field_.group}.{field_.name} | {default} | {field_.doc} |")
    return "\n".join(rows) + "\n"


def _validate_artifacts(settings: Settings) -> None:
    """The `artifacts` group's rules: an http(s) endpoint, both halves of a key pair, a positive deadline."""
    artifacts = settings.artifacts
    endpoint = artifacts.s3_endpoint_url
    if endpoint is not None and not endpoint.startswith(("http://", "https://")):
        raise SettingsError(f"MCPTASKS_S3_ENDPOINT_URL must be an http(s) URL, got {endpoint!r}")
    if (artifacts.s3_access_key_id is None) != (artifacts.s3_secret_access_key is None):
        raise SettingsError(
            "MCPTASKS_S3_ACCESS_KEY_ID and MCPTASKS_S3_SECRET_ACCESS_KEY go together: set both, or neither "
            "(the SDK's own credential chain)"
        )
    if artifacts.s3_timeout_s <= 0:
        raise SettingsError(f"MCPTASKS_S3_TIMEOUT_S must be positive, got {artifacts.s3_timeout_s}")


def trusted_issuers(settings: Settings) -> frozenset[str]:
    """Everyone this server's configuration lets vouch for a principal (`tasks.owner`): `static` with a
    token file, each OIDC issuer URL, `kubernetes` with ServiceAccount tokens; `local` when none is set.
    """
    auth = settings.auth
    trusted = set(auth.oidc_issuer)
    if settings.serve.tokens_file is not None:
        trusted.add(STATIC_ISSUER)
    if auth.service_account_tokens:
        trusted.add(SERVICE_ACCOUNT_ISSUER)
    return frozenset(trusted or {LOCAL_ISSUER})


def legacy_owner_issuer(settings: Settings) -> str:
    """The issuer the task stores give tasks stored before owners named one (`tasks.owner.legacy_issuer`)."""
    return legacy_issuer(settings.auth.legacy_owner_issuer, trusted_issuers(settings))


def _validate_auth(settings: Settings, command: str) -> None:
    """The `auth` group's rules: issuer URLs, an audience where `Host` cannot be trusted, the gateway only."""
    auth = settings.auth
    for issuer in auth.oidc_issuer:
        try:
            check_issuer_url(issuer)
        except ValueError as exc:
            raise SettingsError(f"MCPTASKS_OIDC_ISSUER: {exc}") from exc
    if auth.resource_uri is not None and not auth.resource_uri.startswith(("http://", "https://")):
        raise SettingsError(f"MCPTASKS_RESOURCE_URI must be an http(s) URL, got {auth.resource_uri!r}")
    if auth.oidc_issuer and not settings.serve.loopback and auth.oidc_audience is None and auth.resource_uri is None:
        raise SettingsError(
            "MCPTASKS_OIDC_ISSUER on a non-loopback address needs MCPTASKS_RESOURCE_URI (this server's canonical "
            "URI, e.g. https://mcp.example.com/mcp) or MCPTASKS_OIDC_AUDIENCE: tokens are checked for it"
        )
    legacy = auth.legacy_owner_issuer
    if legacy and legacy not in trusted_issuers(settings):
        raise SettingsError(
            f"MCPTASKS_LEGACY_OWNER_ISSUER names {legacy!r}, which this server does not trust; name one of "
            f"{', '.join(sorted(trusted_issuers(settings)))} (who created the tasks stored before owners named "
            "their issuer)"
        )
    try:
        policy = TenantPolicy.parse(auth.issuer_tenants)
    except ValueError as exc:
        raise SettingsError(f"MCPTASKS_ISSUER_TENANTS: {exc}") from exc
    for issuer in policy.patterns:
        if issuer not in trusted_issuers(settings) or issuer == LOCAL_ISSUER:
            raise SettingsError(
                f"MCPTASKS_ISSUER_TENANTS names the issuer {issuer!r}, which this server does not trust; name "
                f"{', '.join(sorted(trusted_issuers(settings) - {LOCAL_ISSUER})) or 'a configured issuer'}"
            )
    if auth.service_account_tokens and command != "gateway":
        raise SettingsError("MCPTASKS_SERVICE_ACCOUNT_TOKENS needs a cluster: use it with `mcptasks gateway`")
    if auth.oidc_leeway_s < 0 or auth.oidc_fetch_timeout_s <= 0 or auth.oidc_jwks_refresh_min_s < 0:
        raise SettingsError(
            "MCPTASKS_OIDC_LEEWAY_S and MCPTASKS_OIDC_JWKS_REFRESH_MIN_S must be >= 0, "
            "MCPTASKS_OIDC_FETCH_TIMEOUT_S positive"
        )


def _validate_admission(operator: OperatorSettings) -> None:
    """The operator's cap and its Kueue option (`operator.admission`, `operator.kueue`)."""
    if operator.max_running_tasks < 0:
        raise SettingsError(f"MCPTASKS_MAX_RUNNING_TASKS must be >= 0 (0: no cap), got {operator.max_running_tasks}")
    if operator.kueue_queue_name:
        try:
            kueue.check_queue_name(operator.kueue_queue_name)
        except ValueError as exc:
            raise SettingsError(f"MCPTASKS_KUEUE_QUEUE_NAME: {exc}") from exc
    mapped = operator.kueue_queue_name or operator.kueue_tenant_queues or operator.kueue_tool_queues
    if operator.kueue_enabled and not mapped:
        raise SettingsError(
            "MCPTASKS_KUEUE_ENABLED needs a LocalQueue: set MCPTASKS_KUEUE_QUEUE_NAME, MCPTASKS_KUEUE_TENANT_QUEUES "
            "or MCPTASKS_KUEUE_TOOL_QUEUES"
        )


def validate(settings: Settings, command: str = "serve") -> Settings:
    """Check cross-field rules for `command` (`serve` or `gateway`) and finish derived values.

    Raises:
        SettingsError: e.g. a non-loopback `--host` without `--tokens`.
    """
    serve = settings.serve
    if not 0 <= serve.port <= 65535:
        raise SettingsError(f"--port / MCPTASKS_PORT must be 0-65535, got {serve.port}")
    if not serve.loopback and serve.tokens_file is None and not settings.auth.configured:
        raise SettingsError(
            f"refusing to bind {serve.host} without authentication: pass --tokens FILE (MCPTASKS_TOKENS), "
            "set MCPTASKS_OIDC_ISSUER or MCPTASKS_SERVICE_ACCOUNT_TOKENS, or bind a loopback address such as 127.0.0.1"
        )
    _validate_auth(settings, command)
    _validate_artifacts(settings)
    if serve.tokens_file is not None and not serve.tokens_file.is_file():
        raise SettingsError(f"--tokens / MCPTASKS_TOKENS: {serve.tokens_file} is not a file")
    if command == "serve" and not serve.tools_dirs:
        raise SettingsError("--tools / MCPTASKS_TOOLS: give at least one folder of McpTool manifests")
    if settings.kubernetes.runner not in ("none", "local"):
        raise SettingsError(f"--runner / MCPTASKS_RUNNER must be none or local, got {settings.kubernetes.runner!r}")
    worker_url = settings.operator.worker_url
    if worker_url is not None and not worker_url.startswith(("http://", "https://")):
        raise SettingsError(f"--worker-url / MCPTASKS_WORKER_URL must be an http(s) URL, got {worker_url!r}")
    if not 0 < settings.operator.worker_port <= 65535:
        raise SettingsError(
            f"--worker-port / MCPTASKS_WORKER_PORT must be 1-65535, got {settings.operator.worker_port}"
        )
    operator = settings.operator
    tls_files = (operator.worker_tls_cert_file, operator.worker_tls_key_file)
    if (tls_files[0] is None) != (tls_files[1] is None):
        raise SettingsError("set both MCPTASKS_WORKER_TLS_CERT_FILE and MCPTASKS_WORKER_TLS_KEY_FILE, or neither")
    for tls_file in tls_files:
        if tls_file is not None and not tls_file.is_file():
            raise SettingsError(f"MCPTASKS_WORKER_TLS_CERT_FILE / _KEY_FILE: {tls_file} is not a file")
    if tls_files[0] is not None and worker_url is not None and not worker_url.startswith("https://"):
        raise SettingsError(f"the worker API serves HTTPS: --worker-url must be https, got {worker_url!r}")
    if not 0 < operator.leader_retry_period_s < operator.leader_renew_deadline_s < operator.leader_lease_duration_s:
        raise SettingsError(
            "the leader election needs 0 < MCPTASKS_LEADER_RETRY_PERIOD_S < MCPTASKS_LEADER_RENEW_DEADLINE_S < "
            f"MCPTASKS_LEADER_LEASE_DURATION_S, got {operator.leader_retry_period_s}, "
            f"{operator.leader_renew_deadline_s}, {operator.leader_lease_duration_s}"
        )
    _validate_admission(operator)
    if settings.kubernetes.kubeconfig is not None and not settings.kubernetes.kubeconfig.is_file():
        raise SettingsError(f"--kubeconfig / MCPTASKS_KUBECONFIG: {settings.kubernetes.kubeconfig} is not a file")
    gateway = settings.gateway
    if gateway.max_body_bytes <= 0 or gateway.body_read_timeout_s <= 0 or gateway.idle_timeout_s <= 0:
        raise SettingsError(
            "MCPTASKS_MAX_BODY_BYTES, MCPTASKS_BODY_READ_TIMEOUT_S and MCPTASKS_IDLE_TIMEOUT_S must be positive"
        )
    runner = settings.runner
    if runner.inline_result_max_bytes <= 0 or runner.max_concurrent_tasks <= 0 or runner.max_input_rounds <= 0:
        raise SettingsError(
            "MCPTASKS_INLINE_RESULT_MAX_BYTES, MCPTASKS_MAX_CONCURRENT_TASKS and MCPTASKS_MAX_INPUT_ROUNDS "
            "must be positive"
        )
    try:
        settings.limits.check()
    except ValueError as exc:
        raise SettingsError(str(exc)) from exc
    try:
        gateway.check()
    except ValueError as exc:
        raise SettingsError(str(exc)) from exc
    return _set(settings, "gateway", "loopback_only", serve.loopback)
