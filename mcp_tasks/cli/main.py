"""`mcptasks` command line: parse flags, load `Settings`, configure logging, dispatch the subcommand."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from dataclasses import replace
from pathlib import Path

from mcp_tasks import __version__
from mcp_tasks.cli.settings import Settings, SettingsError, from_environment, settings_table, validate
from mcp_tasks.observability import tracing
from mcp_tasks.observability.logs import JsonFormatter, TaskFields
from mcp_tasks.tasks.errors import InvalidToolManifest


def _configure_logging(level: str, as_json: bool) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(
        JsonFormatter() if as_json else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    handler.addFilter(TaskFields())
    logging.basicConfig(level=level.upper(), handlers=[handler])


def _add_server_flags(command: argparse.ArgumentParser) -> None:
    command.add_argument("--host", help="bind address (default 127.0.0.1; non-loopback needs --tokens) [MCPTASKS_HOST]")
    command.add_argument("--port", type=int, help="TCP port (default 8000) [MCPTASKS_PORT]")
    command.add_argument(
        "--data-dir",
        type=Path,
        help="serve: database, artifacts, requestState key; gateway: artifacts and requestState key, a volume "
        "shared with the operator and the other replicas (default .data) [MCPTASKS_DATA_DIR]",
    )
    command.add_argument("--tokens", type=Path, metavar="FILE", help="YAML bearer-token file [MCPTASKS_TOKENS]")
    _add_log_flags(command)


def _add_log_flags(command: argparse.ArgumentParser) -> None:
    command.add_argument("--log-level", help="DEBUG, INFO, WARNING... (default INFO) [MCPTASKS_LOG_LEVEL]")
    command.add_argument("--log-json", action="store_true", help="log JSON lines [MCPTASKS_LOG_JSON]")
    command.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve Prometheus /metrics on this port (default 0: off) [MCPTASKS_METRICS_PORT]",
    )


def _add_cluster_flags(command: argparse.ArgumentParser, objects: str) -> None:
    command.add_argument(
        "--kubeconfig",
        type=Path,
        metavar="FILE",
        help="kubeconfig (default: in-cluster, then $KUBECONFIG or ~/.kube/config) [MCPTASKS_KUBECONFIG]",
    )
    command.add_argument("--context", help="kubeconfig context (default: current) [MCPTASKS_KUBE_CONTEXT]")
    command.add_argument(
        "--namespace", help=f"namespace of {objects} (default: the pod's or the context's) [MCPTASKS_NAMESPACE]"
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mcptasks", description="Durable MCP Tasks for long-running tool calls.")
    parser.add_argument("--version", action="version", version=f"mcptasks {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the embedded server: SQLite store + local runner")
    _add_server_flags(serve)
    serve.add_argument(
        "--tools",
        action="append",
        type=Path,
        metavar="DIR",
        help="folder of McpTool manifests; repeatable (default examples/tools if that folder is in the current "
        "directory) [MCPTASKS_TOOLS]",
    )
    gateway = commands.add_parser("gateway", help="run the gateway on Kubernetes: McpTask store + McpTool catalog")
    _add_server_flags(gateway)
    _add_cluster_flags(gateway, "McpTasks and McpTools")
    gateway.add_argument(
        "--runner",
        choices=["none", "local"],
        help="who runs tasks: none = the operator (default), local = this process, for development [MCPTASKS_RUNNER]",
    )
    operator = commands.add_parser("operator", help="run McpTasks as Kubernetes Jobs (kopf)")
    _add_cluster_flags(operator, "McpTasks, McpTools and Jobs")
    operator.add_argument(
        "--worker-url",
        help="URL at which tool pods reach this operator's worker API (default http://127.0.0.1:<worker-port>), e.g. "
        "http://mcptasks-operator.mcp-tasks.svc:8081 [MCPTASKS_WORKER_URL]",
    )
    operator.add_argument("--worker-port", type=int, help="worker API port (default 8081) [MCPTASKS_WORKER_PORT]")
    operator.add_argument(
        "--start-deadline",
        type=float,
        metavar="SECONDS",
        help="fail a task whose pod has not started after this long (default 300) [MCPTASKS_START_DEADLINE_S]",
    )
    operator.add_argument(
        "--data-dir",
        type=Path,
        help="artifacts of large results (a volume the gateways share; default .data) [MCPTASKS_DATA_DIR]",
    )
    _add_log_flags(operator)
    commands.add_parser("settings", help="print every MCPTASKS_* environment variable as a Markdown table")
    crds = commands.add_parser("crds", help="print the CustomResourceDefinitions (pipe to kubectl apply -f -)")
    crds.add_argument("--write", type=Path, metavar="DIR", help="write them as files into DIR instead")
    crds.add_argument("--check", type=Path, metavar="DIR", help="exit 1 if the files in DIR differ from the code")
    return parser


def load_settings(args: argparse.Namespace, environ: dict[str, str]) -> Settings:
    """Defaults → environment → flags, then validation.

    Raises:
        SettingsError: a value is invalid (the message names the flag).
    """
    settings = from_environment(Settings(), environ)
    serve = settings.serve
    if getattr(args, "host", None) is not None:
        serve = replace(serve, host=args.host)
    if getattr(args, "port", None) is not None:
        serve = replace(serve, port=args.port)
    tools = getattr(args, "tools", None)
    if tools:
        serve = replace(serve, tools_dirs=tuple(tools))
    elif args.command == "serve" and not serve.tools_dirs and Path("examples/tools").is_dir():
        serve = replace(serve, tools_dirs=(Path("examples/tools"),))
    if args.data_dir is not None:
        serve = replace(serve, data_dir=args.data_dir)
    if getattr(args, "tokens", None) is not None:
        serve = replace(serve, tokens_file=args.tokens)
    if args.log_level is not None:
        serve = replace(serve, log_level=args.log_level)
    if args.log_json:
        serve = replace(serve, log_json=True)
    if getattr(args, "metrics_port", None) is not None:
        serve = replace(serve, metrics_port=args.metrics_port)
    kube = settings.kubernetes
    for name in ("kubeconfig", "context", "namespace", "runner"):
        value = getattr(args, name, None)
        if value is not None:
            kube = replace(kube, **{name: value})
    operator = settings.operator
    for flag, name in (
        ("worker_url", "worker_url"),
        ("worker_port", "worker_port"),
        ("start_deadline", "start_deadline_s"),
    ):
        value = getattr(args, flag, None)
        if value is not None:
            operator = replace(operator, **{name: value})
    return validate(replace(settings, serve=serve, kubernetes=kube, operator=operator), args.command)


def _crds(args: argparse.Namespace) -> int:
    from mcp_tasks.store.kubernetes import crds

    files = crds.rendered()
    if args.check is not None:
        stale = [
            name
            for name, text in files.items()
            if not (args.check / name).is_file() or (args.check / name).read_text(encoding="utf-8") != text
        ]
        for name in stale:
            print(
                f"mcptasks: {args.check / name} differs from the models; run `mcptasks crds --write {args.check}`",
                file=sys.stderr,
            )
        return 1 if stale else 0
    if args.write is not None:
        args.write.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (args.write / name).write_text(text, encoding="utf-8")
            print(args.write / name)
        return 0
    print("---\n".join(text for text in files.values()), end="")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `mcptasks` console script; returns the exit code."""
    args = _parser().parse_args(argv)
    if args.command == "crds":
        return _crds(args)
    if args.command == "settings":
        print(settings_table(), end="")
        return 0
    try:
        settings = load_settings(args, dict(os.environ))
    except SettingsError as exc:
        print(f"mcptasks: {exc}", file=sys.stderr)
        return 2
    _configure_logging(settings.serve.log_level, settings.serve.log_json)
    from mcp_tasks.cli.gateway import gateway
    from mcp_tasks.cli.operator import operator
    from mcp_tasks.cli.serve import serve

    run = {"serve": serve, "gateway": gateway, "operator": operator}[args.command]
    if tracing.configure(service_name=f"mcp-tasks-{args.command}"):
        logging.getLogger("mcp_tasks.cli").info("OpenTelemetry traces on (OTEL_* variables)")
    try:
        asyncio.run(run(settings))
    except (InvalidToolManifest, SettingsError) as exc:
        print(f"mcptasks: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        where = (
            f"{settings.operator.worker_host}:{settings.operator.worker_port} (worker API)"
            if args.command == "operator"
            else f"{settings.serve.host}:{settings.serve.port}"
        )
        print(f"mcptasks: cannot listen on {where}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
