"""A real Kubernetes control plane for tests: etcd, kube-apiserver and kube-controller-manager.

The binaries are a user's own (`KUBEBUILDER_ASSETS`, `PATH`; `tests/binaries.py`), else built from Go modules
by `tests/controlplane/build.sh` into a cache outside the repository. `ControlPlane.start()` runs them on free
loopback ports in a temporary folder: etcd without fsync, the API server with its self-signed serving
certificate, a static admin token (`system:masters`) and RBAC, the controller manager with the job,
garbage-collector, ttl-after-finished, namespace, deployment, replicaset, disruption and persistentvolume-binder
controllers (not the EndpointSlice controller: it refuses the process node's loopback pod addresses).
It writes a kubeconfig and installs the project's CRDs from the CRD chart's templates.
There is no kubelet and no scheduler: with `process_node`, `tests/controlplane/process_node.py` binds
every pod and runs it as local processes (each pod on its own loopback address; see that module).
`helm` and `actionlint`, built by the same script, sit beside the binaries (`ControlPlane.helm`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml

from tests import binaries

REPO = Path(__file__).resolve().parent.parent.parent
CRDS = REPO / "charts" / "mcp-tasks-crds" / "templates"
START_TIMEOUT_S = 90.0


def wait_until(check: Callable[[], bool], timeout_s: float, failed: Callable[[], str], interval_s: float = 0.2) -> None:
    """Block until `check()` holds; `RuntimeError(failed())` once `timeout_s` has passed.

    `check` may raise to give up at once (a process exited). For the synchronous start-up of processes that
    tell nobody when they are ready (components of the control plane, an operator): this polls.
    """
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(failed())
        time.sleep(interval_s)  # the one synchronous polling wait of the tests: start-ups no event tells of


def _failed(result: subprocess.CompletedProcess[str]) -> subprocess.CalledProcessError:
    """The error for a failed helm/kubectl run, with its stderr as a note so a test failure shows why."""
    error = subprocess.CalledProcessError(result.returncode, result.args, result.stdout, result.stderr)
    error.add_note(f"stderr: {result.stderr.strip()[-4000:]}")
    return error


class ControlPlaneUnavailable(Exception):
    """A binary is not found here, or is of another version; the message says which is needed and how to build it."""


def testbin_dir() -> Path:
    """One folder holding etcd, kube-apiserver, kube-controller-manager, kubectl, helm and actionlint: each found
    as `tests/binaries.py` says (`KUBEBUILDER_ASSETS`, `MCPTASKS_HELM`, `MCPTASKS_ACTIONLINT`, `PATH`, then what
    `tests/controlplane/build.sh` built), version-checked; the build's folder itself when every one is from there.

    Raises:
        ControlPlaneUnavailable: one is missing or of another version (the message says which is needed and how
            to build it).
    """
    try:
        return binaries.gathered({name: binaries.find(name) for name in binaries.CONTROL_PLANE})
    except binaries.BinaryUnavailable as exc:
        raise ControlPlaneUnavailable(f"the test control plane cannot start: {exc}") from exc


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class ControlPlane:
    """A running control plane in `workdir`. Use `start()` and `stop()`, or as a context manager."""

    workdir: Path
    bin_dir: Path = field(default_factory=testbin_dir)
    controllers: bool = True
    process_node: bool = False
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    logs: dict[str, IO[bytes]] = field(default_factory=dict)
    token: str = field(default_factory=lambda: secrets.token_hex(16))
    api_port: int = 0
    address: str = "127.0.0.1"
    """Where the API server listens and advertises itself (the real node's tier uses its bridge address)."""
    apiserver_flags: dict[str, str | None] = field(default_factory=dict)
    """kube-apiserver flags (without `--`) replacing or adding to the defaults; `None` drops a default."""
    controller_manager_flags: dict[str, str | None] = field(default_factory=dict)
    """kube-controller-manager flags replacing or adding to the defaults; `None` drops a default."""

    @property
    def server(self) -> str:
        """`https://<address>:<port>` of the API server."""
        return f"https://{self.address}:{self.api_port}"

    @property
    def kubeconfig(self) -> Path:
        """Admin kubeconfig (token auth, the API server's own CA)."""
        return self.workdir / "admin.kubeconfig"

    @property
    def ca_file(self) -> Path:
        """The API server's self-signed serving certificate chain."""
        return self.workdir / "pki" / "apiserver.crt"

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start etcd, the API server and (with `controllers`) the controller manager; install the CRDs.

        Raises:
            RuntimeError: a component exited or did not become ready within 90 s (its log is quoted).
        """
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self._start_etcd()
            self._start_apiserver()
            self._write_kubeconfig()
            if self.controllers:
                self._start_controller_manager()
            if self.process_node:
                self._spawn(
                    "process-node",
                    [
                        sys.executable,
                        "-m",
                        "tests.controlplane.process_node",
                        "--kubeconfig",
                        str(self.kubeconfig),
                        "--workdir",
                        str(self.workdir / "node"),
                    ],
                    cwd=REPO,
                )
            self.kubectl("apply", "--server-side", "-f", str(CRDS))
            self.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop every component (SIGTERM, then SIGKILL after 10 s)."""
        for name in reversed(list(self.processes)):
            process = self.processes.pop(name)
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        for log in self.logs.values():
            log.close()
        self.logs.clear()

    def log_tail(self, name: str, lines: int = 30) -> str:
        """The last `lines` lines a component logged (for failure messages)."""
        path = self.workdir / f"{name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def helm(self, *args: str, timeout_s: float = 300) -> str:
        """Run the built helm against this control plane; return stdout.

        Raises:
            subprocess.CalledProcessError: helm failed (stderr in the exception).
        """
        result = subprocess.run(
            [str(self.bin_dir / "helm"), "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout_s,
            env={
                **os.environ,
                "HELM_CACHE_HOME": str(self.workdir / "helm" / "cache"),
                "HELM_CONFIG_HOME": str(self.workdir / "helm" / "config"),
                "HELM_DATA_HOME": str(self.workdir / "helm" / "data"),
            },
        )
        if result.returncode != 0:
            raise _failed(result)
        return result.stdout

    def kubectl(self, *args: str, input_text: str | None = None) -> str:
        """Run the built kubectl against this control plane; return stdout.

        Raises:
            subprocess.CalledProcessError: kubectl failed (stderr in the exception).
        """
        result = subprocess.run(
            [str(self.bin_dir / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            input=input_text,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        if result.returncode != 0:
            raise _failed(result)
        return result.stdout

    def _spawn(self, name: str, args: list[str], cwd: Path | None = None) -> subprocess.Popen[bytes]:
        log = (self.workdir / f"{name}.log").open("wb")
        self.logs[name] = log
        process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd)
        self.processes[name] = process
        return process

    def _wait(
        self, name: str, url: str, context: ssl.SSLContext | None = None, headers: dict[str, str] | None = None
    ) -> None:

        def ready() -> bool:
            process = self.processes[name]
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode}:\n{self.log_tail(name)}")
            with contextlib.suppress(OSError, urllib.error.URLError):
                request = urllib.request.Request(url, headers=headers or {})
                with urllib.request.urlopen(request, timeout=2, context=context) as response:
                    return bool(response.status == 200)
            return False

        wait_until(
            ready,
            START_TIMEOUT_S,
            lambda: f"{name} not ready at {url} after {START_TIMEOUT_S} s:\n{self.log_tail(name)}",
        )

    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        self._spawn(
            "etcd",
            [
                str(self.bin_dir / "etcd"),
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=default=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        self._wait("etcd", f"{self.etcd_url}/health")

    def _start_apiserver(self) -> None:
        pki = self.workdir / "pki"
        pki.mkdir(exist_ok=True)
        sa_key = pki / "sa.key"
        subprocess.run(["openssl", "genrsa", "-out", str(sa_key), "2048"], check=True, capture_output=True)
        tokens = self.workdir / "tokens.csv"
        tokens.write_text(f"{self.token},admin,admin,system:masters\n")
        self.api_port = free_port()
        flags: dict[str, str | None] = {
            "etcd-servers": self.etcd_url,
            "bind-address": self.address,
            "advertise-address": self.address,
            "secure-port": str(self.api_port),
            "cert-dir": str(pki),
            "token-auth-file": str(tokens),
            "authorization-mode": "RBAC",
            "service-account-issuer": "https://kubernetes.default.svc.cluster.local",
            "service-account-key-file": str(sa_key),
            "service-account-signing-key-file": str(sa_key),
            "service-cluster-ip-range": "10.0.0.0/24",
            "allow-privileged": "true",
            "endpoint-reconciler-type": "none",
            "disable-admission-plugins": "ServiceAccount",
            "enable-priority-and-fairness": "false",
            "max-requests-inflight": "0",
            "max-mutating-requests-inflight": "0",
        }
        self._spawn("kube-apiserver", [str(self.bin_dir / "kube-apiserver"), *_flags(flags, self.apiserver_flags)])
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        self._wait("kube-apiserver", f"{self.server}/readyz", context, {"Authorization": f"Bearer {self.token}"})

    def _write_kubeconfig(self) -> None:
        config: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "test", "cluster": {"server": self.server, "certificate-authority": str(self.ca_file)}}
            ],
            "users": [{"name": "admin", "user": {"token": self.token}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "admin", "namespace": "default"}}],
            "current-context": "test",
        }
        self.kubeconfig.write_text(json.dumps(config, indent=2))

    def _start_controller_manager(self) -> None:
        flags: dict[str, str | None] = {
            "kubeconfig": str(self.kubeconfig),
            "leader-elect": "false",
            "controllers": "job-controller,garbage-collector-controller,ttl-after-finished-controller,"
            "namespace-controller,deployment-controller,replicaset-controller,disruption-controller,"
            "serviceaccount-controller,persistentvolume-binder-controller,resourcequota-controller",
            "bind-address": "127.0.0.1",
            "secure-port": str(free_port()),
            "service-account-private-key-file": str(self.workdir / "pki" / "sa.key"),
            "use-service-account-credentials": "false",
        }
        self._spawn(
            "kube-controller-manager",
            [str(self.bin_dir / "kube-controller-manager"), *_flags(flags, self.controller_manager_flags)],
        )


def _flags(defaults: dict[str, str | None], overrides: dict[str, str | None]) -> list[str]:
    """`--name=value` arguments: `defaults` updated by `overrides`, dropping names whose value is `None`."""
    merged = {**defaults, **overrides}
    return [f"--{name}={value}" for name, value in merged.items() if value is not None]


def local_tool_manifests(folders: list[Path], warm: bool = True) -> list[dict[str, Any]]:
    """The McpTools in `folders`, with `container.workingDir` set to their folder.

    In a pod the working directory comes from the image; a `--runner local` gateway runs the command on
    this machine, so the manifests name the folder that holds the tool's script. `warm=False` drops
    `spec.warm`: a namespace per test must not start a Deployment of workers for every warm tool.
    """
    documents: list[dict[str, Any]] = []
    for folder in folders:
        for path in sorted(folder.glob("*.yaml")):
            for document in yaml.safe_load_all(path.read_text()):
                if document:
                    document["spec"]["container"].setdefault("workingDir", str(folder.resolve()))
                    if not warm:
                        document["spec"].pop("warm", None)
                    documents.append(document)
    return documents


def main(argv: list[str] | None = None) -> int:
    """`python -m tests.controlplane.cluster WORKDIR [--namespace NS] [--tools DIR]...`.

    Starts a control plane, creates the namespace, applies the McpTools (for `--runner local`), prints
    the kubeconfig path and runs until SIGINT/SIGTERM. For the conformance run and the benchmark.
    """
    parser = argparse.ArgumentParser(prog="python -m tests.controlplane.cluster")
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--namespace", default="mcp-tasks")
    parser.add_argument("--tools", type=Path, action="append", default=[])
    parser.add_argument("--no-controllers", action="store_true", help="do not start kube-controller-manager")
    parser.add_argument("--process-node", action="store_true", help="run pods as local processes")
    args = parser.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with ControlPlane(args.workdir, controllers=not args.no_controllers, process_node=args.process_node) as plane:
        plane.kubectl("create", "namespace", args.namespace)
        if args.tools:
            manifests = yaml.safe_dump_all(local_tool_manifests(args.tools))
            plane.kubectl("apply", "-n", args.namespace, "-f", "-", input_text=manifests)
        print(plane.kubeconfig, flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
