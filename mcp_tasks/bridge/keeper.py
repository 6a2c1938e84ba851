"""The keeper: the process between the bridge and an MCP server it starts, so the server never outlives it.

`python -I -S keeper.py <bridge pid> <server argv...>` (the bridge runs it by path, `target.keeper_argv`;
standard library only, so it starts in ~20 ms with nothing but the server's environment). It
starts the server as its own child, in its own process group (the bridge starts the keeper in a session of
its own), waits for it, and exits as the server did: its exit code, or killed by the same signal. The
bridge's client (the SDK's stdio transport, or `target._http_server`) sees the keeper as the server: its
stdin and stdout are the server's, and every stop they send goes to the process group, which holds both.

It stops the server when the bridge ends, whatever way it ends (normal exit, `os._exit`, SIGTERM, SIGKILL):

- Linux: the kernel sends the keeper `PARENT_GONE_SIGNAL` when the bridge's thread that started it ends
  (`PR_SET_PDEATHSIG`, prctl(2)); the bridge starts servers from its event loop's thread, which lives as
  long as the bridge does. Elsewhere (best effort): the keeper checks every `PARENT_POLL_S` whether it was
  reparented.
- Then, as the MCP lifecycle's shutdown (2025-11-25 basic/lifecycle#shutdown): the server's stdin is closed
  already (the bridge held its other end), the keeper waits `STOP_GRACE_S` for it to exit, SIGTERMs the
  group, waits `STOP_GRACE_S` again, and SIGKILLs the group (itself with it).
- SIGTERM, SIGINT or SIGHUP to the keeper: a group-wide signal (the SDK's and the bridge's stops) reached
  the server too, so the keeper only waits `STOP_GRACE_S` for it and then SIGKILLs the group; a signal to
  the keeper alone thus still stops the server, without sending it a second one.
- SIGKILL of the keeper alone: on Linux the server gets SIGKILL too (its own `PR_SET_PDEATHSIG`).

Exit code 127: the server's command could not be started (the reason on stderr).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from types import FrameType
from typing import Final, NoReturn

PARENT_GONE_SIGNAL: Final = signal.SIGUSR1
"""The signal Linux sends the keeper when the bridge ends (no one else sends it)."""
STOP_GRACE_S: Final = 2.0
"""Each wait of the stop sequence (for the server to exit, then after SIGTERM), in seconds: the SDK's."""
PARENT_POLL_S: Final = 0.5
"""How often the keeper checks for a reparenting where the kernel cannot tell it (not Linux), in seconds."""
EXIT_POLL_S: Final = 0.01
"""How often the keeper checks whether the server exited while it stops it, in seconds."""
CANNOT_START_EXIT_CODE: Final = 127
_PR_SET_PDEATHSIG: Final = 1


class _Stop(Exception):
    """Raised by the signal handlers out of the keeper's wait: start the stop sequence."""

    def __init__(self, parent_gone: bool) -> None:
        super().__init__(parent_gone)
        self.parent_gone = parent_gone


def _set_parent_death_signal(signum: int) -> None:
    """`prctl(PR_SET_PDEATHSIG, signum)` on Linux; nothing elsewhere.

    Raises:
        OSError: the kernel refused.
    """
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


def _kill_with_the_keeper() -> None:
    """In the server's child, before exec: SIGKILL it if the keeper dies (a SIGKILL of the keeper alone)."""
    _set_parent_death_signal(signal.SIGKILL)


def _exit_as(status: int) -> NoReturn:
    """Exit as a process with `waitpid` status `status` did: the same code, or killed by the same signal."""
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        os._exit(128 + signum)
    os._exit(os.waitstatus_to_exitcode(status))


def _exited_within(pid: int, seconds: float) -> int | None:
    """The server's `waitpid` status once it exits within `seconds`, else `None`."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return 0
        if done:
            return status
        if time.monotonic() >= deadline:
            return None
        time.sleep(EXIT_POLL_S)


def _stop(pid: int, parent_gone: bool) -> NoReturn:
    """The stop sequence: wait for the server, SIGTERM the group (the bridge is gone), wait, SIGKILL the group.

    With the bridge alive (a signal to the keeper), a server that exits in time is mirrored, and what it left
    in the group is the bridge's to stop (it signals the group); with the bridge gone, the group is killed
    whatever the server did, the keeper with it.
    """
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, PARENT_GONE_SIGNAL):
        signal.signal(signum, lambda _signum, _frame: None)  # a second stop changes nothing
    group = os.getpgrp()
    status = _exited_within(pid, STOP_GRACE_S)
    if status is None and parent_gone:
        os.killpg(group, signal.SIGTERM)
        status = _exited_within(pid, STOP_GRACE_S)
    if status is not None and not parent_gone:
        _exit_as(status)
    os.killpg(group, signal.SIGKILL)
    os._exit(128 + signal.SIGKILL)  # pragma: no cover - the SIGKILL ended the keeper


def _wait(pid: int, parent: int) -> int:
    """The server's `waitpid` status once it exits.

    Raises:
        _Stop: the bridge ended, or the keeper got SIGTERM/SIGINT/SIGHUP.
    """
    if sys.platform.startswith("linux"):
        return os.waitpid(pid, 0)[1]
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if os.getppid() != parent:
            raise _Stop(parent_gone=True)
        time.sleep(PARENT_POLL_S)


def main(argv: list[str]) -> NoReturn:
    """Run the keeper (see the module docstring); `argv`: the bridge's pid, then the server's argv."""

    def parent_gone(_signum: int, _frame: FrameType | None) -> None:
        raise _Stop(parent_gone=True)

    def stopped(_signum: int, _frame: FrameType | None) -> None:
        raise _Stop(parent_gone=False)

    parent, command = int(argv[0]), argv[1:]
    if os.getpgrp() != os.getpid():
        os.setsid()  # the stop sequence signals the keeper's group: never the bridge's
    server: subprocess.Popen[bytes] | None = None
    try:
        signal.signal(PARENT_GONE_SIGNAL, parent_gone)
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, stopped)
        _set_parent_death_signal(PARENT_GONE_SIGNAL)
        if os.getppid() != parent:  # the bridge ended before the kernel could tell us
            raise _Stop(parent_gone=True)
        linux = sys.platform.startswith("linux")
        try:
            preexec = _kill_with_the_keeper if linux else None
            server = subprocess.Popen(command, preexec_fn=preexec)  # noqa: PLW1509 - the keeper has one thread
        except OSError as exc:
            sys.stderr.write(f"mcp-tasks keeper: cannot start the MCP server {command[0]!r}: {exc}\n")
            sys.stderr.flush()
            os._exit(CANNOT_START_EXIT_CODE)
        status = _wait(server.pid, parent)
    except _Stop as stop:
        if server is None:
            os._exit(CANNOT_START_EXIT_CODE)  # stopped before the server started
        _stop(server.pid, parent_gone=stop.parent_gone)
    _exit_as(status)


if __name__ == "__main__":
    main(sys.argv[1:])
