"""Process identity: tell a live tool process apart from a later one that reuses its pid.

The embedded runner writes a run's `(pid, identity)` into its lease when the process starts; a runner
restarted after a crash adopts the run only if a process with that pid *and* that identity is alive.
On Linux the identity is the boot id plus the process's start time in clock ticks (`/proc/<pid>/stat`
field 22), which no other process of the same boot can share. Where `/proc` is missing there is no
identity, and runs are never adopted (the older restart rules apply). Blocking reads of a few bytes
from procfs; cheap enough for the event loop.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
from pathlib import Path
from typing import Final

_PROC: Final = Path("/proc")


def _boot_id() -> str:
    try:
        return (_PROC / "sys" / "kernel" / "random" / "boot_id").read_text().strip()
    except OSError:
        return ""


_BOOT_ID: Final = _boot_id()


def of(pid: int) -> str | None:
    """The identity of live process `pid` (`<boot id>:<start ticks>`), or `None` if gone or unknowable.

    A zombie (exited, not yet reaped) has no identity: its run is over.
    """
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # Fields after the command name, which is in parentheses and may itself hold spaces or ')'.
    fields = stat[stat.rfind(")") + 2 :].split()
    if len(fields) < 20 or fields[0] in ("Z", "X") or not _BOOT_ID:
        return None
    return f"{_BOOT_ID}:{fields[19]}"


def is_alive(pid: int, identity: str) -> bool:
    """True when process `pid` is alive and is still the process that `identity` names."""
    return bool(identity) and of(pid) == identity


def holder_is_alive(holder: str) -> bool | None:
    """Whether the runner named by a lease `holder` (`<host>:<pid>:<nonce>`) still runs on this host.

    Returns `None` when the holder is on another host (only its lease expiry can tell) or unparsable.
    """
    host, _, rest = holder.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return None
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def signal_group(pid: int, identity: str, signum: int = signal.SIGKILL) -> bool:
    """Send `signum` to the process group a tool leads, if that process is still the one `identity` names.

    Returns True when the signal was sent.
    """
    if not is_alive(pid, identity):
        return False
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)
        return True
    return False
