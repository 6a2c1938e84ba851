"""A real node beside a test control plane: containerd, runc, kubelet, kube-scheduler, kube-proxy, CoreDNS.

`RealNode.start()` brings up, under one temporary state folder, everything a pod needs to run as on a
real cluster, so the Helm release and the tool images run as a platform team would run them:

- a Linux bridge `mcpt0` holding the node address 10.213.0.1 (pods get addresses in 10.213.0.0/16 from
  the CNI `bridge` plugin, with `portmap` and `loopback`, from Debian's `containernetworking-plugins`);
- a control plane of its own (`tests.controlplane.cluster.ControlPlane`) listening on the node address,
  with a serving certificate that names it, `kubernetes.default` and the Service address 10.214.0.1,
  the `Node,RBAC` authorizers and `NodeRestriction`, ServiceAccount admission (so the kubelet projects
  tokens), the lease endpoint reconciler (so `kubernetes.default` has an endpoint) and every default
  controller of the controller manager (among them node-lifecycle, which removes the not-ready taint
  once the node is Ready, EndpointSlice and the root-CA publisher);
- containerd with its own root, state, socket and config (CRI on, `restrict_oom_score_adj = true`,
  overlayfs, `sandbox_image` a local pause image) and the images imported from our own dockerd
  (`tests/node/images.py`);
- kubelet authenticated as the node `system:node:mcpt-node` (client certificate signed by the tier's
  CA), serving with webhook authentication and authorization, so `kubectl logs/exec/port-forward` work
  through it; kube-scheduler; kube-proxy in iptables mode (`masqueradeAll`, so a pod reaching a Service
  backed by a pod on the same bridge gets its replies back without `br_netfilter` settings);
  CoreDNS as a host process on the node address serving `cluster.local`, the kubelet's `clusterDNS`.

`RealNode.stop()` undoes all of it: pods are deleted and their sandboxes stopped through the kubelet
(so CNI releases their addresses and rules), then every process is stopped, `kube-proxy --cleanup`
removes the Service rules, the kubelet's canary chains are removed, mounts under the state folder are
unmounted and the bridge deleted. It never flushes a table and never touches what it did not create.

The binaries come from `tests/controlplane/build.sh` and `tests/node/build.sh`; the Debian packages
from `tests/node/packages.sh`. `unavailable_reason()` says why this machine cannot run the tier.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml

from tests.controlplane.cluster import ControlPlane, ControlPlaneUnavailable, free_port, testbin_dir, wait_until
from tests.node import images

HERE = Path(__file__).resolve().parent
NODE_NAME = "mcpt-node"
BRIDGE = "mcpt0"
NODE_IP = "10.213.0.1"
POD_CIDR = "10.213.0.0/16"
SERVICE_CIDR = "10.214.0.0/24"
KUBERNETES_SERVICE_IP = "10.214.0.1"
CNI_BIN = Path("/usr/lib/cni")
CNI_NETWORK = "mcpt"
READY_TIMEOUT_S = 120.0
LOCK = Path("/run/lock/mcp-tasks-real-node.lock")
"""One real node per machine (kube-proxy's chains are global): a second session waits for the first."""
LOCK_TIMEOUT_S = 900.0
DRAIN_TIMEOUT_S = 90.0
KUBELET_CHAINS = (
    ("filter", "KUBE-FIREWALL"),
    ("filter", "KUBE-KUBELET-CANARY"),
    ("mangle", "KUBE-KUBELET-CANARY"),
    ("mangle", "KUBE-IPTABLES-HINT"),
    ("nat", "KUBE-KUBELET-CANARY"),
)
"""The chains the kubelet itself makes (the localnet guard, its flush canaries); kube-proxy's go with
`kube-proxy --cleanup`. Only these are removed, with the jumps to them: nothing else is flushed."""


class NodeUnavailable(Exception):
    """This machine cannot run the real-node tier; the message says why and what to do."""


def node_bin_dir() -> Path:
    """The folder holding kubelet, kube-scheduler, kube-proxy and coredns (`tests/node/build.sh`).

    Raises:
        NodeUnavailable: they are not built (the message says how to build them).
    """
    result = subprocess.run(
        ["bash", str(HERE / "build.sh"), "--cached-only"], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise NodeUnavailable(
            "the real node's binaries (kubelet, kube-scheduler, kube-proxy, CoreDNS) are not built here: run "
            "`bash tests/node/build.sh` (Go and the Go module proxy; about 15 min cold, cached after)"
        )
    return Path(result.stdout.strip().splitlines()[-1])


def unavailable_reason() -> str | None:
    """Why this machine cannot run containers under a real kubelet, or `None` when it can.

    Checks: Linux, root, the Debian packages (`tests/node/packages.sh --check`), overlayfs, the binaries.
    """
    if platform.system() != "Linux":
        return "the real-node tier runs containers under a kubelet: it needs Linux"
    if os.geteuid() != 0:
        return "the real-node tier runs containerd, kubelet and kube-proxy (iptables): it needs root"
    packages = subprocess.run(
        ["bash", str(HERE / "packages.sh"), "--check"], capture_output=True, text=True, check=False
    )
    if packages.returncode != 0:
        return packages.stderr.strip()
    if "overlay" not in Path("/proc/filesystems").read_text():
        return "the real-node tier needs overlayfs (containerd's snapshotter): `modprobe overlay`"
    try:
        testbin_dir()
        node_bin_dir()
    except (ControlPlaneUnavailable, NodeUnavailable) as exc:
        return str(exc)
    return None


def _remove_chain(tool: str, table: str, chain: str) -> None:
    """Delete the rules of `table` that jump to `chain`, then `chain` itself; nothing when it is absent."""
    listed = _run([tool, "-t", table, "-S"], check=False)
    if listed.returncode != 0 or f"-N {chain}" not in listed.stdout.splitlines():
        return
    for rule in listed.stdout.splitlines():
        words = shlex.split(rule)
        if words[:1] == ["-A"] and words[1] != chain and words[-2:] == ["-j", chain]:
            _run([tool, "-t", table, "-D", *words[1:]], check=False)
    _run([tool, "-t", table, "-F", chain], check=False)
    _run([tool, "-t", table, "-X", chain], check=False)


def _end_stale_node(workdir: Path) -> None:
    """SIGKILL what a killed session left running: every process naming its `workdir` (containerd, its
    shims, kubelet, kube-proxy, CoreDNS, the control plane) and every process in the kubelet's `kubepods`
    cgroups (its pods; one real node per machine, so they are that session's), then unmount its mounts."""
    marker = str(workdir).encode()
    victims: set[int] = set()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            with contextlib.suppress(OSError):
                if marker in (proc / "cmdline").read_bytes():
                    victims.add(int(proc.name))
    for hierarchy in Path("/sys/fs/cgroup").iterdir():
        for procs in (hierarchy / "kubepods").rglob("cgroup.procs"):
            with contextlib.suppress(OSError, ValueError):
                victims.update(int(line) for line in procs.read_text().split())
    for pid in victims:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    if workdir.exists():
        for mount in images.mounts_under(workdir):
            subprocess.run(["umount", "-l", mount], capture_output=True, check=False)


def _remove_cni_leftovers() -> None:
    """What CNI DEL would have removed had containerd torn the pods down: the bridge plugin's `ipMasq`
    chains (their rules carry the comment `name: "mcpt"`) with their POSTROUTING jumps, and the network
    namespaces containerd pinned under /var/run/netns (one real node per machine: its `cni-*` are ours)."""
    listed = _run(["iptables", "-t", "nat", "-S"], check=False)
    chains: set[str] = set()
    for rule in listed.stdout.splitlines():
        words = shlex.split(rule)
        if words[:1] != ["-A"] or f'name: "{CNI_NETWORK}"' not in " ".join(words):
            continue
        if words[1] == "POSTROUTING" and words[-2] == "-j":
            _run(["iptables", "-t", "nat", "-D", *words[1:]], check=False)
            chains.add(words[-1])
        elif words[1].startswith("CNI-"):
            chains.add(words[1])
    # a chain the plugin made for a pod whose set-up was cut short holds no rule to name it; -X keeps
    # any chain still referenced
    rules = {shlex.split(rule)[1] for rule in listed.stdout.splitlines() if rule.startswith("-A ")}
    chains |= {line.split()[1] for line in listed.stdout.splitlines() if line.startswith("-N CNI-")} - rules
    for chain in chains:
        _run(["iptables", "-t", "nat", "-F", chain], check=False)
        _run(["iptables", "-t", "nat", "-X", chain], check=False)
    for netns in Path("/var/run/netns").glob("cni-*"):
        _run(["ip", "netns", "delete", netns.name], check=False)


def _run(args: list[str], timeout_s: float = 60, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, check=check, timeout=timeout_s)


@dataclass
class Pki:
    """The tier's certificate authority and the certificates signed by it (openssl, valid 2 days).

    `ca.crt` is the API server's client CA and the root pods trust (`kube-root-ca.crt`); the API server's
    serving certificate names the node address, 127.0.0.1, the `kubernetes` Service address and names.
    """

    folder: Path

    def path(self, name: str) -> Path:
        """`<folder>/<name>`."""
        return self.folder / name

    def create(self) -> None:
        """Make the CA and the API server's, the kubelet's and the API server's kubelet-client certificates.

        Raises:
            subprocess.CalledProcessError: openssl failed.
        """
        self.folder.mkdir(parents=True, exist_ok=True)
        ca_key, ca_crt = self.path("ca.key"), self.path("ca.crt")
        _run(["openssl", "genrsa", "-out", str(ca_key), "2048"])
        _run(
            [
                *("openssl", "req", "-x509", "-new", "-key", str(ca_key), "-out", str(ca_crt), "-days", "2"),
                *("-subj", "/CN=mcp-tasks-real-node-ca"),
            ]
        )
        names = ["kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"]
        sans = ",".join([*(f"DNS:{n}" for n in [*names, "localhost"]), f"IP:{NODE_IP}", "IP:127.0.0.1"])
        self._sign("apiserver", "/CN=kube-apiserver", "serverAuth", f"{sans},IP:{KUBERNETES_SERVICE_IP}")
        self._sign("kubelet-client", f"/O=system:nodes/CN=system:node:{NODE_NAME}", "clientAuth")
        # how the API server proves itself to the kubelet (logs, exec, port-forward): a cluster admin
        self._sign("apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client", "clientAuth")
        # the API server's serving chain, under the name ControlPlane.ca_file reads
        self.path("apiserver-chain.crt").write_text(self.path("apiserver.crt").read_text() + ca_crt.read_text())

    def _sign(self, name: str, subject: str, usage: str, sans: str | None = None) -> None:
        key, csr, crt = self.path(f"{name}.key"), self.path(f"{name}.csr"), self.path(f"{name}.crt")
        extensions = self.path(f"{name}.ext")
        lines = ["basicConstraints=CA:FALSE", "keyUsage=digitalSignature,keyEncipherment", f"extendedKeyUsage={usage}"]
        if sans:
            lines.append(f"subjectAltName={sans}")
        extensions.write_text("\n".join(lines) + "\n")
        _run(["openssl", "genrsa", "-out", str(key), "2048"])
        _run(["openssl", "req", "-new", "-key", str(key), "-out", str(csr), "-subj", subject])
        _run(
            [
                *("openssl", "x509", "-req", "-in", str(csr), "-CA", str(self.path("ca.crt")), "-CAkey"),
                *(str(self.path("ca.key")), "-CAcreateserial", "-out", str(crt), "-days", "2"),
                *("-extfile", str(extensions)),
            ]
        )


@dataclass
class RealNode:
    """A running node (and its control plane) under `workdir`. Use `start()`/`stop()` or as a context manager.

    `plane` is the control plane (kubectl, helm, kubeconfig) once started.
    """

    workdir: Path
    node_bin: Path = field(default_factory=node_bin_dir)
    plane: ControlPlane | None = None
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    logs: dict[str, IO[bytes]] = field(default_factory=dict)
    bridge_created: bool = False
    lock: IO[bytes] | None = None

    @property
    def state(self) -> Path:
        """Folder of the node's own state (containerd, kubelet, CNI)."""
        return self.workdir / "node"

    @property
    def containerd_socket(self) -> Path:
        """containerd's gRPC socket."""
        return self.state / "containerd" / "containerd.sock"

    @property
    def control_plane(self) -> ControlPlane:
        """The started control plane.

        Raises:
            RuntimeError: not started.
        """
        if self.plane is None:
            raise RuntimeError("the real node is not started")
        return self.plane

    def __enter__(self) -> RealNode:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Build and import the images, start the control plane and the node, wait for the node `Ready`
        without taints and for CoreDNS.

        Raises:
            RuntimeError: a component exited or was not ready in time (its log is quoted).
            subprocess.CalledProcessError: a set-up command failed (its stderr is in the exception).
        """
        self.state.mkdir(parents=True, exist_ok=True)
        try:
            image_tar = self._build_images()
            self._take_lock()
            self._create_bridge()
            pki = Pki(self.workdir / "pki")
            pki.create()
            self.plane = self._control_plane(pki)
            self.plane.start()
            self._start_containerd()
            _run(
                ["ctr", "--address", str(self.containerd_socket), "-n", "k8s.io", "images", "import", str(image_tar)],
                600,
            )
            self._start_coredns()
            self._start_kubelet(pki)
            self._start_scheduler()
            self._start_kube_proxy()
            self._wait_node_ready()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Delete every pod through the kubelet, stop every process, remove the rules, mounts and bridge."""
        plane = self.plane
        if plane is not None and "kubelet" in self.processes:
            self._stop_process("kube-scheduler")
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                plane.kubectl(
                    "delete", "pods", "--all", "--all-namespaces", "--force", "--grace-period=0", "--wait=false"
                )
            with contextlib.suppress(RuntimeError):
                wait_until(lambda: not self._running_tasks(), DRAIN_TIMEOUT_S, lambda: "pods still running")
        for name in ("kube-proxy", "kube-scheduler", "kubelet", "coredns"):
            self._stop_process(name)
        if "kube-proxy" in self.logs or (self.state / "kube-proxy.yaml").exists():
            subprocess.run(
                [str(self.node_bin / "kube-proxy"), "--cleanup", f"--config={self.state / 'kube-proxy.yaml'}"],
                capture_output=True,
                check=False,
                timeout=60,
            )
        for tool in ("iptables", "ip6tables"):
            for table, chain in KUBELET_CHAINS:
                _remove_chain(tool, table, chain)
        if self.containerd_socket.exists():
            self._kill_remaining_containers()
        self._stop_process("containerd")
        self._kill_orphan_shims()
        _remove_cni_leftovers()  # none after a clean drain; what pods the kubelet could not stop left
        for mount in images.mounts_under(self.state):
            subprocess.run(["umount", "-l", mount], capture_output=True, check=False)
        if self.bridge_created:
            subprocess.run(["ip", "link", "delete", BRIDGE], capture_output=True, check=False)
            self.bridge_created = False
        self._remove_pod_cgroups()
        if self.plane is not None:
            self.plane.stop()
        for log in self.logs.values():
            log.close()
        self.logs.clear()
        if self.lock is not None:
            self.lock.truncate(0)  # a clean end: the next session has nothing to clean
            self.lock.close()  # releases the flock
            self.lock = None

    def log_tail(self, name: str, lines: int = 40) -> str:
        """The last `lines` lines a node component logged (for failure messages)."""
        path = self.workdir / f"{name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    # ------------------------------------------------------------------------------------------ start-up

    def _build_images(self) -> Path:
        dockerd = images.Dockerd(self.workdir / "dockerd")
        dockerd.start()
        try:
            built = images.build_images(dockerd, self.workdir / "build")
            return images.export(dockerd, built, self.workdir / "images.tar")
        finally:
            dockerd.stop()

    def _take_lock(self) -> None:
        """Hold the machine's real-node lock; then what a killed session left (its bridge, rules) is stale.

        Raises:
            RuntimeError: another session held it for `LOCK_TIMEOUT_S`.
        """
        LOCK.parent.mkdir(parents=True, exist_ok=True)
        self.lock = LOCK.open("a+b")

        def taken() -> bool:
            assert self.lock is not None
            try:
                fcntl.flock(self.lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            return True

        wait_until(taken, LOCK_TIMEOUT_S, lambda: f"another real node held {LOCK} for {LOCK_TIMEOUT_S} s", 1.0)
        self.lock.seek(0)
        stale = self.lock.read().decode().strip()  # the workdir of a session that never reached its clean-up
        if stale:
            _end_stale_node(Path(stale))
        if stale or Path(f"/sys/class/net/{BRIDGE}").exists():
            subprocess.run(
                [str(self.node_bin / "kube-proxy"), "--cleanup"], capture_output=True, check=False, timeout=60
            )
            for tool in ("iptables", "ip6tables"):
                for table, chain in KUBELET_CHAINS:
                    _remove_chain(tool, table, chain)
            _run(["ip", "link", "delete", BRIDGE], check=False)
            _remove_cni_leftovers()
        self.lock.truncate(0)
        self.lock.write(str(self.workdir.resolve()).encode())
        self.lock.flush()

    def _create_bridge(self) -> None:
        """The bridge the CNI plugin will use, made now so the API server and CoreDNS can listen on it."""
        if Path(f"/sys/class/net/{BRIDGE}").exists():
            raise RuntimeError(
                f"the bridge {BRIDGE} exists already: another real node runs here, or one was not cleaned up"
            )
        _run(["ip", "link", "add", BRIDGE, "type", "bridge"])
        self.bridge_created = True
        _run(["ip", "addr", "add", f"{NODE_IP}/16", "dev", BRIDGE])
        _run(["ip", "link", "set", BRIDGE, "up"])

    def _control_plane(self, pki: Pki) -> ControlPlane:
        folder = self.workdir / "control-plane"
        (folder / "pki").mkdir(parents=True, exist_ok=True)
        shutil.copy(pki.path("apiserver-chain.crt"), folder / "pki" / "apiserver.crt")
        return ControlPlane(
            folder,
            address=NODE_IP,
            apiserver_flags={
                "tls-cert-file": str(folder / "pki" / "apiserver.crt"),
                "tls-private-key-file": str(pki.path("apiserver.key")),
                "client-ca-file": str(pki.path("ca.crt")),
                "authorization-mode": "Node,RBAC",
                "enable-admission-plugins": "NodeRestriction",
                "disable-admission-plugins": None,
                "endpoint-reconciler-type": "lease",
                "service-cluster-ip-range": SERVICE_CIDR,
                "kubelet-client-certificate": str(pki.path("apiserver-kubelet-client.crt")),
                "kubelet-client-key": str(pki.path("apiserver-kubelet-client.key")),
                "kubelet-preferred-address-types": "InternalIP",
            },
            controller_manager_flags={
                "controllers": "*",
                "root-ca-file": str(pki.path("ca.crt")),
                "node-monitor-grace-period": "40s",
            },
        )

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        log = (self.workdir / f"{name}.log").open("wb")
        self.logs[name] = log
        process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.processes[name] = process
        return process

    def _alive(self, name: str) -> None:
        process = self.processes[name]
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with {process.returncode}:\n{self.log_tail(name)}")

    def _start_containerd(self) -> None:
        root = self.state / "containerd"
        cni_conf = self.state / "cni" / "net.d"
        cni_conf.mkdir(parents=True, exist_ok=True)
        (cni_conf / "10-mcpt.conflist").write_text(json.dumps(self._cni_config(), indent=2))
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        config = f"""version = 2
root = "{root / "root"}"
state = "{root / "state"}"
[grpc]
  address = "{self.containerd_socket}"
[ttrpc]
  address = "{self.containerd_socket}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{root / "opt"}"
[{cri}]
  sandbox_image = "docker.io/library/{images.PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        SystemdCgroup = false
  [{cri}.cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{cni_conf}"
"""
        (root).mkdir(parents=True, exist_ok=True)
        (root / "config.toml").write_text(config)
        self._spawn("containerd", ["containerd", "--config", str(root / "config.toml")])

        def answers() -> bool:
            self._alive("containerd")
            return (
                self.containerd_socket.exists()
                and _run(["ctr", "--address", str(self.containerd_socket), "version"], check=False).returncode == 0
            )

        wait_until(answers, READY_TIMEOUT_S, lambda: f"containerd did not answer:\n{self.log_tail('containerd')}")

    def _cni_config(self) -> dict[str, Any]:
        return {
            "cniVersion": "1.0.0",
            "name": CNI_NETWORK,
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": BRIDGE,
                    "isGateway": True,
                    "ipMasq": True,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": POD_CIDR, "gateway": NODE_IP}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(self.state / "cni" / "ipam"),
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
                {"type": "loopback"},
            ],
        }

    def _start_coredns(self) -> None:
        plane = self.control_plane
        health, ready = free_port(), free_port()
        corefile = self.state / "Corefile"
        corefile.write_text(
            f""".:53 {{
    bind {NODE_IP}
    ready 127.0.0.1:{ready}
    health 127.0.0.1:{health}
    errors
    cache 5
    kubernetes cluster.local in-addr.arpa ip6.arpa {{
        kubeconfig {plane.kubeconfig} test
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }}
    forward . /etc/resolv.conf
}}
"""
        )
        self._spawn("coredns", [str(self.node_bin / "coredns"), "-conf", str(corefile)])
        self._wait_http("coredns", f"http://127.0.0.1:{ready}/ready")

    def _start_kubelet(self, pki: Pki) -> None:
        plane = self.control_plane
        kubeconfig = self.state / "kubelet.kubeconfig"
        kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "test",
                            "cluster": {"server": plane.server, "certificate-authority": str(pki.path("ca.crt"))},
                        }
                    ],
                    "users": [
                        {
                            "name": "node",
                            "user": {
                                "client-certificate": str(pki.path("kubelet-client.crt")),
                                "client-key": str(pki.path("kubelet-client.key")),
                            },
                        }
                    ],
                    "contexts": [{"name": "test", "context": {"cluster": "test", "user": "node"}}],
                    "current-context": "test",
                }
            )
        )
        resolv = self.state / "resolv.conf"
        resolv.write_text("")  # pods' search list: the cluster's only, none of the host's
        self.healthz_port = free_port()
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": NODE_IP,
            "port": free_port(),
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": self.healthz_port,
            "cgroupDriver": "cgroupfs",
            "failSwapOn": False,
            "failCgroupV1": False,
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(pki.path("ca.crt"))},
            },
            "authorization": {"mode": "Webhook"},
            "clusterDNS": [NODE_IP],
            "clusterDomain": "cluster.local",
            "resolvConf": str(resolv),
            "podLogsDir": str(self.state / "pod-logs"),
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {"memory.available": "50Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
            "serializeImagePulls": False,
        }
        (self.state / "kubelet.yaml").write_text(yaml.safe_dump(config))
        self._spawn(
            "kubelet",
            [
                str(self.node_bin / "kubelet"),
                f"--config={self.state / 'kubelet.yaml'}",
                f"--kubeconfig={kubeconfig}",
                f"--root-dir={self.state / 'kubelet'}",
                f"--cert-dir={self.state / 'kubelet-pki'}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={NODE_IP}",
                "--v=1",
            ],
        )

    def _start_scheduler(self) -> None:
        plane = self.control_plane
        self._spawn(
            "kube-scheduler",
            [
                str(self.node_bin / "kube-scheduler"),
                f"--kubeconfig={plane.kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
            ],
        )

    def _start_kube_proxy(self) -> None:
        plane = self.control_plane
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(plane.kubeconfig)},
            "hostnameOverride": NODE_NAME,
            "mode": "iptables",
            "clusterCIDR": POD_CIDR,
            "healthzBindAddress": f"127.0.0.1:{free_port()}",
            "metricsBindAddress": f"127.0.0.1:{free_port()}",
            "nodePortAddresses": [f"{NODE_IP}/32"],
            "iptables": {"masqueradeAll": True},
            # 0: leave the machine's conntrack settings as they are
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        }
        (self.state / "kube-proxy.yaml").write_text(yaml.safe_dump(config))
        self._spawn("kube-proxy", [str(self.node_bin / "kube-proxy"), f"--config={self.state / 'kube-proxy.yaml'}"])

    def _wait_http(self, name: str, url: str) -> None:
        def ready() -> bool:
            self._alive(name)
            with contextlib.suppress(OSError, urllib.error.URLError), urllib.request.urlopen(url, timeout=2) as answer:
                return bool(answer.status == 200)
            return False

        wait_until(ready, READY_TIMEOUT_S, lambda: f"{name} not ready at {url}:\n{self.log_tail(name)}")

    def _wait_node_ready(self) -> None:
        plane = self.control_plane

        def ready() -> bool:
            for name in ("kubelet", "kube-scheduler", "kube-proxy", "coredns", "containerd"):
                self._alive(name)
            try:
                node = json.loads(plane.kubectl("get", "node", NODE_NAME, "-o", "json"))
            except subprocess.CalledProcessError:
                return False
            conditions = {c["type"]: c["status"] for c in node["status"].get("conditions", [])}
            return conditions.get("Ready") == "True" and not node["spec"].get("taints")

        wait_until(
            ready,
            READY_TIMEOUT_S,
            lambda: f"node {NODE_NAME} not Ready without taints in {READY_TIMEOUT_S} s:\n{self.log_tail('kubelet')}",
            interval_s=1.0,
        )

    # ------------------------------------------------------------------------------------------ teardown

    def _stop_process(self, name: str) -> None:
        process = self.processes.pop(name, None)
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def _ctr(self, *args: str) -> subprocess.CompletedProcess[str]:
        return _run(["ctr", "--address", str(self.containerd_socket), "-n", "k8s.io", *args], check=False)

    def _running_tasks(self) -> list[str]:
        result = self._ctr("tasks", "list", "-q")
        return result.stdout.split() if result.returncode == 0 else []

    def _kill_remaining_containers(self) -> None:
        """What the kubelet did not stop (it was killed, or timed out): kill and delete through containerd."""
        for task in self._running_tasks():
            self._ctr("tasks", "kill", "--signal", "SIGKILL", task)
            self._ctr("tasks", "delete", "--force", task)
        listed = self._ctr("containers", "list", "-q")
        for container in listed.stdout.split():
            self._ctr("containers", "delete", container)

    def _kill_orphan_shims(self) -> None:
        """containerd's shims outlive it by design; those serving our socket are ours to end."""
        marker = str(self.containerd_socket).encode()
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                cmdline = (proc / "cmdline").read_bytes()
                if b"containerd-shim" in cmdline and marker in cmdline:
                    os.kill(int(proc.name), signal.SIGKILL)

    def _remove_pod_cgroups(self) -> None:
        """The kubelet's `kubepods` cgroups (cgroupfs driver), once empty; deepest first."""
        for hierarchy in Path("/sys/fs/cgroup").iterdir():
            top = hierarchy / "kubepods"
            if not top.is_dir():
                continue
            folders = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True)
            for folder in [*folders, top]:
                with contextlib.suppress(OSError):
                    folder.rmdir()


def main(argv: list[str] | None = None) -> int:
    """`python -m tests.node.cluster WORKDIR`: start a real node, print the kubeconfig, run until SIGTERM."""
    import threading

    workdir = Path((argv or sys.argv[1:])[0])
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with RealNode(workdir) as node:
        print(node.control_plane.kubeconfig, flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
