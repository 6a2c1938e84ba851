"""`Settings`: every knob of `mcptasks serve`, grouped by concern, loaded and validated once.

Sources, later winning: defaults → environment (`MCPTASKS_*`) → command-line flags. Bad values fail
at start-up naming the flag or variable. Below `cli` nothing reads the environment.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from mcp_tasks.gateway.settings import GatewaySettings
from mcp_tasks.operator.settings import OperatorSettings
from mcp_tasks.runner.runner import RunnerSettings


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
        log_level: Python logging level name (default INFO).
        log_json: log one JSON object per line instead of text.
    """

    host: str = "127.0.0.1"
    port: int = 8000
    tools_dirs: tuple[Path, ...] = ()
    data_dir: Path = Path(".data")
    tokens_file: Path | None = None
    log_level: str = "INFO"
    log_json: bool = False

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
    """

    kubeconfig: Path | None = None
    context: str | None = None
    namespace: str | None = None
    runner: str = "none"
    watch_timeout_s: int = 300


@dataclass(frozen=True, slots=True)
class Settings:
    """All settings of `mcptasks serve` and `mcptasks gateway`, by group."""

    serve: ServeSettings = field(default_factory=ServeSettings)
    gateway: GatewaySettings = field(default_factory=GatewaySettings)
    runner: RunnerSettings = field(default_factory=RunnerSettings)
    kubernetes: KubernetesSettings = field(default_factory=KubernetesSettings)
    operator: OperatorSettings = field(default_factory=OperatorSettings)


_ENV_INT = {
    "MCPTASKS_PORT": ("serve", "port"),
    "MCPTASKS_MAX_CONCURRENT_TASKS": ("runner", "max_concurrent_tasks"),
    "MCPTASKS_INLINE_RESULT_MAX_BYTES": ("runner", "inline_result_max_bytes"),
    "MCPTASKS_MAX_BODY_BYTES": ("gateway", "max_body_bytes"),
    "MCPTASKS_WORKER_PORT": ("operator", "worker_port"),
}
_ENV_FLOAT = {
    "MCPTASKS_LEASE_DURATION_S": ("runner", "lease_duration_s"),
    "MCPTASKS_SWEEP_INTERVAL_S": ("runner", "sweep_interval_s"),
    "MCPTASKS_START_DEADLINE_S": ("operator", "start_deadline_s"),
    "MCPTASKS_OPERATOR_SWEEP_INTERVAL_S": ("operator", "sweep_interval_s"),
}
_ENV_STR = {
    "MCPTASKS_HOST": ("serve", "host"),
    "MCPTASKS_LOG_LEVEL": ("serve", "log_level"),
    "MCPTASKS_NAMESPACE": ("kubernetes", "namespace"),
    "MCPTASKS_KUBE_CONTEXT": ("kubernetes", "context"),
    "MCPTASKS_RUNNER": ("kubernetes", "runner"),
    "MCPTASKS_WORKER_URL": ("operator", "worker_url"),
}
_ENV_PATH = {
    "MCPTASKS_DATA_DIR": ("serve", "data_dir"),
    "MCPTASKS_TOKENS": ("serve", "tokens_file"),
    "MCPTASKS_KUBECONFIG": ("kubernetes", "kubeconfig"),
}


def _set(settings: Settings, group: str, name: str, value: object) -> Settings:
    return replace(settings, **{group: replace(getattr(settings, group), **{name: value})})


def from_environment(settings: Settings, environ: Mapping[str, str]) -> Settings:
    """Apply `MCPTASKS_*` variables.

    Raises:
        SettingsError: a numeric variable does not parse.
    """
    for variable, (group, name) in _ENV_INT.items():
        if variable in environ:
            try:
                settings = _set(settings, group, name, int(environ[variable]))
            except ValueError as exc:
                raise SettingsError(f"{variable} must be an integer, got {environ[variable]!r}") from exc
    for variable, (group, name) in _ENV_FLOAT.items():
        if variable in environ:
            try:
                settings = _set(settings, group, name, float(environ[variable]))
            except ValueError as exc:
                raise SettingsError(f"{variable} must be a number, got {environ[variable]!r}") from exc
    for variable, (group, name) in _ENV_STR.items():
        if variable in environ:
            settings = _set(settings, group, name, environ[variable])
    for variable, (group, name) in _ENV_PATH.items():
        if environ.get(variable):
            settings = _set(settings, group, name, Path(environ[variable]))
    if environ.get("MCPTASKS_TOOLS"):
        settings = _set(
            settings, "serve", "tools_dirs", tuple(Path(p) for p in environ["MCPTASKS_TOOLS"].split(os.pathsep))
        )
    if environ.get("MCPTASKS_LOG_JSON", "").lower() in {"1", "true", "yes"}:
        settings = _set(settings, "serve", "log_json", True)
    return settings


def validate(settings: Settings, command: str = "serve") -> Settings:
    """Check cross-field rules for `command` (`serve` or `gateway`) and finish derived values.

    Raises:
        SettingsError: e.g. a non-loopback `--host` without `--tokens`.
    """
    serve = settings.serve
    if not 0 <= serve.port <= 65535:
        raise SettingsError(f"--port / MCPTASKS_PORT must be 0-65535, got {serve.port}")
    if not serve.loopback and serve.tokens_file is None:
        raise SettingsError(
            f"refusing to bind {serve.host} without authentication: pass --tokens FILE (MCPTASKS_TOKENS) "
            "or bind a loopback address such as 127.0.0.1"
        )
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
    if settings.kubernetes.kubeconfig is not None and not settings.kubernetes.kubeconfig.is_file():
        raise SettingsError(f"--kubeconfig / MCPTASKS_KUBECONFIG: {settings.kubernetes.kubeconfig} is not a file")
    if settings.runner.inline_result_max_bytes <= 0 or settings.runner.max_concurrent_tasks <= 0:
        raise SettingsError("MCPTASKS_INLINE_RESULT_MAX_BYTES and MCPTASKS_MAX_CONCURRENT_TASKS must be positive")
    return _set(settings, "gateway", "loopback_only", serve.loopback)
