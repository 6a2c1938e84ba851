"""The project's image, built by the real-node tier from the repository's Dockerfile without a registry.

No image registry is reachable from the test machines, so the image's base is made from Debian packages
(`mmdebstrap`, docs/kubernetes.md "Air-gapped image build") and the project's dependencies come from a
wheelhouse built on the host; both are cached under `~/.cache/mcp-tasks/node-images/`, keyed by their
inputs, as the control plane's binaries are. The builder is `dockerd` from Debian's `docker.io`, started
here with its own data root, exec root, pid file and socket under a state folder, with no bridge and no
iptables rules, and stopped at the end. Images leave it with `docker save`, for `ctr images import`.

Called by `tests/node/cluster.py`; never touches the machine's own docker or containerd state.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import shutil
import signal
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from tests.controlplane.cluster import REPO, wait_until

CACHE = Path.home() / ".cache" / "mcp-tasks" / "node-images"
SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
"""What the base holds besides Debian's minbase: Python 3.11 (the Dockerfile makes a venv), CA certificates."""
BUILD_TIMEOUT_S = 1200.0
START_TIMEOUT_S = 60.0
IMAGE = "mcp-tasks:node-test"
"""The project's image as the tier tags it (gateway, operator and the example tools)."""
PAUSE_IMAGE = "mcp-tasks-pause:node-test"
"""containerd's `sandbox_image`: the base with `sleep infinity` as its entrypoint."""
BASE_IMAGE = "mcp-tasks-base:node-test"
CONTEXT_FILES = ("Dockerfile", "pyproject.toml", "README.md", "mcp_tasks", "examples")
"""What the Dockerfile copies from the repository (the tier's build context holds only these and the wheels)."""
PREVIOUS_COMMIT = "728d5c14f1c011c5214cf6b7cefd01a073ccd573"
"""The release an upgrade is tested from (`tests/node/test_upgrade.py`): the commit before issue 30's first
change, whose owners named no issuer and whose stores dropped fields they did not know."""
PREVIOUS_IMAGE = "mcp-tasks:node-previous"
"""The image of `PREVIOUS_COMMIT`, built like `IMAGE` from that commit's files."""


def _key(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]


def _run(args: list[str], timeout_s: float = BUILD_TIMEOUT_S, **kwargs: object) -> None:
    """Run a build step; its output goes to stderr (pytest shows it on failure).

    Raises:
        subprocess.CalledProcessError: the step failed.
    """
    subprocess.run(args, check=True, timeout=timeout_s, stdout=sys.stderr, stderr=sys.stderr, **kwargs)  # type: ignore[call-overload]  # kwargs are Popen's


def base_rootfs() -> Path:
    """A tar of Debian `SUITE` minbase with `BASE_PACKAGES` (about 75 s cold), cached by its inputs.

    Raises:
        subprocess.CalledProcessError: mmdebstrap failed (no Debian mirror reachable, not root).
    """
    target = CACHE / f"base-{SUITE}-{_key(SUITE, *BASE_PACKAGES)}.tar"
    if target.exists():
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial.tar")
    _run(["mmdebstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", SUITE, str(partial)])
    partial.rename(target)
    return target


def wheelhouse() -> Path:
    """Wheels of the project's dependencies (extras `s3` and `servers`) and of its build backend, built on the host with
    this interpreter's pip, cached by `pyproject.toml` and the Python version. The project's own wheel is
    not kept: the image builds it from the copied source.

    Raises:
        subprocess.CalledProcessError: pip could not build or download a wheel.
    """
    pyproject = (REPO / "pyproject.toml").read_text()
    target = CACHE / f"wheels-py{sys.version_info.major}{sys.version_info.minor}-{_key(pyproject)}"
    if target.exists():
        return target
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    pip = [sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(partial)]
    _run([*pip, f"{REPO}[s3,servers]"])
    _run([*pip, "setuptools>=68", "wheel"])  # build-system.requires, for the image's --no-index build
    for own in partial.glob("mcp_tasks-*.whl"):
        own.unlink()
    partial.rename(target)
    return target


@dataclass
class Dockerd:
    """A `dockerd` of our own under `state` (data root, exec root, pid file, socket), no bridge, no iptables.

    Use `start()` and `stop()`; `docker(...)` runs the CLI against it.
    """

    state: Path
    process: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = None
    images: set[str] = field(default_factory=set)

    @property
    def host(self) -> str:
        """`unix://` address of its socket."""
        return f"unix://{self.state / 'docker.sock'}"

    def start(self) -> None:
        """Start dockerd (and the containerd it manages) and wait until it answers.

        Raises:
            RuntimeError: it exited or did not answer within 60 s (its log is quoted).
        """
        self.state.mkdir(parents=True, exist_ok=True)
        self.log = (self.state / "dockerd.log").open("wb")
        self.process = subprocess.Popen(
            [
                "dockerd",
                f"--host={self.host}",
                f"--data-root={self.state / 'data'}",
                f"--exec-root={self.state / 'exec'}",
                f"--pidfile={self.state / 'dockerd.pid'}",
                "--bridge=none",
                "--iptables=false",
                "--ip-masq=false",
                "--storage-driver=overlay2",
                "--exec-opt=native.cgroupdriver=cgroupfs",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

        def answers() -> bool:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"dockerd exited with {self.process.returncode}:\n{self._tail()}")
            return (
                subprocess.run(["docker", "-H", self.host, "version"], capture_output=True, check=False).returncode == 0
            )

        wait_until(answers, START_TIMEOUT_S, lambda: f"dockerd did not answer in {START_TIMEOUT_S} s:\n{self._tail()}")

    def stop(self) -> None:
        """SIGTERM dockerd (it stops its containerd), SIGKILL after 20 s."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.log is not None:
            self.log.close()
        # dockerd leaves its overlay mounts behind only when killed; unmount what is left under our root
        for mount in mounts_under(self.state):
            subprocess.run(["umount", "-l", mount], check=False, capture_output=True)

    def docker(self, *args: str, timeout_s: float = BUILD_TIMEOUT_S, **kwargs: object) -> None:
        """Run the docker CLI against this daemon.

        Raises:
            subprocess.CalledProcessError: the command failed.
        """
        _run(["docker", "-H", self.host, *args], timeout_s=timeout_s, **kwargs)

    def _tail(self) -> str:
        path = self.state / "dockerd.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-30:]) if path.exists() else ""


def mounts_under(root: Path) -> list[str]:
    """Mount points below `root`, deepest first (from /proc/self/mounts)."""
    prefix = str(root.resolve())
    points = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    return sorted((p for p in points if p.startswith(prefix + "/") or p == prefix), key=len, reverse=True)


def previous_source(target: Path) -> Path | None:
    """The files of `PREVIOUS_COMMIT` (`git archive`) unpacked into `target`; `None` when this clone does
    not hold that commit (a shallow clone), then the upgrade test skips saying so."""
    if (target / "Dockerfile").exists():
        return target
    found = subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"{PREVIOUS_COMMIT}^{{commit}}"], check=False)
    if found.returncode != 0:
        return None
    target.mkdir(parents=True, exist_ok=True)
    archive = subprocess.Popen(["git", "-C", str(REPO), "archive", PREVIOUS_COMMIT], stdout=subprocess.PIPE)
    try:
        subprocess.run(["tar", "-x", "-C", str(target)], stdin=archive.stdout, check=True)
    finally:
        if archive.stdout is not None:
            archive.stdout.close()
        if archive.wait() != 0:
            raise subprocess.CalledProcessError(archive.returncode, "git archive")
    return target


def _build_project(dockerd: Dockerd, source: Path, context: Path, wheels: Path, tag: str) -> None:
    """The project's image `tag` from `source`'s Dockerfile and files (`CONTEXT_FILES`), without network."""
    shutil.rmtree(context, ignore_errors=True)
    context.mkdir(parents=True)
    for name in CONTEXT_FILES:
        item = source / name
        if item.is_dir():
            shutil.copytree(item, context / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(item, context / name)
    shutil.copytree(wheels, context / "wheels")
    dockerd.docker(
        "build",
        "--network=none",
        *("--build-arg", f"BASE={BASE_IMAGE}", "--build-arg", "WHEELS=wheels"),
        *("-t", tag, str(context)),
    )


def _image_extras(dockerfile: Path) -> set[str]:
    """The extras a Dockerfile's `pip install '.[a,b]'` installs (none when it installs plain `.`)."""
    return {
        extra.strip()
        for found in re.findall(r"'\.\[([^\]]*)\]'", dockerfile.read_text())
        for extra in found.split(",")
        if extra.strip()
    }


def shares_wheelhouse(previous: Path) -> bool:
    """Whether the `wheelhouse` of this tree holds every wheel the release at `previous` installs: the same
    build system, the same dependencies, and each extra its Dockerfile installs unchanged here (this tree may
    add extras, change the development ones and tool sections; those change nothing the previous image
    installs).
    """
    before = tomllib.loads((previous / "pyproject.toml").read_text())
    now = tomllib.loads((REPO / "pyproject.toml").read_text())
    extras_before = before["project"].get("optional-dependencies", {})
    extras_now = now["project"].get("optional-dependencies", {})
    return (
        before.get("build-system") == now.get("build-system")
        and before["project"].get("dependencies") == now["project"].get("dependencies")
        and all(extras_now.get(name) == extras_before.get(name) for name in _image_extras(previous / "Dockerfile"))
    )


def build_images(dockerd: Dockerd, workdir: Path) -> list[str]:
    """Import the cached base, build the pause image and the project's image from the repository's
    Dockerfile (`BASE` the Debian base, `WHEELS` the wheelhouse, no network during the build), and the
    image of `PREVIOUS_COMMIT` when this clone holds it and `shares_wheelhouse` (the wheelhouse is
    shared). Returns the tags built.

    Raises:
        subprocess.CalledProcessError: a step failed (its output is on stderr).
    """
    rootfs = base_rootfs()
    wheels = wheelhouse()
    with rootfs.open("rb") as tar:
        dockerd.docker("import", "-", BASE_IMAGE, stdin=tar)
    pause = workdir / "pause"
    pause.mkdir(parents=True, exist_ok=True)
    (pause / "Dockerfile").write_text(f'FROM {BASE_IMAGE}\nENTRYPOINT ["/bin/sleep", "infinity"]\n')
    dockerd.docker("build", "--network=none", "-t", PAUSE_IMAGE, str(pause))
    _build_project(dockerd, REPO, workdir / "context", wheels, IMAGE)
    built = [IMAGE, PAUSE_IMAGE]
    previous = previous_source(workdir / "previous")
    if previous is not None and shares_wheelhouse(previous):
        _build_project(dockerd, previous, workdir / "context-previous", wheels, PREVIOUS_IMAGE)
        built.append(PREVIOUS_IMAGE)
    return built


def export(dockerd: Dockerd, images: list[str], target: Path) -> Path:
    """`docker save` of `images` into the tar `target` (for `ctr images import`).

    Raises:
        subprocess.CalledProcessError: docker save failed.
    """
    with contextlib.suppress(FileNotFoundError):
        target.unlink()
    dockerd.docker("save", "-o", str(target), *images)
    return target


def main() -> int:
    """`python -m tests.node.images`: build (or find cached) the Debian base and the wheelhouse, so that
    `make pytest` does not spend its time bound on them; print their paths."""
    print(base_rootfs())
    print(wheelhouse())
    return 0


if __name__ == "__main__":
    sys.exit(main())
