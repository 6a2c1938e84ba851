"""One tool process: spawn the manifest's command (or adopt one), keep its stderr bounded, stop it gracefully.

The embedded runner's mapping from an McpTool container to a local process: `spec.container.command`
is run in the manifest's folder (or `workingDir`), with `spec.container.env` and the runtime-contract
variables; a first element of `python`/`python3` means this server's own interpreter, so the
`mcp_tasks.runtime` helper is importable. The image is not used. Each process leads its own process
group, so a stop reaches its children too. Of the pod shape only plain `env` values and
`resources.limits.memory` (as `RLIMIT_AS`) have a local meaning; the rest is ignored, as
`store.manifests` logs once per tool.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final

from mcp_tasks.runner.identity import of as identity_of
from mcp_tasks.runner.identity import signal_group
from mcp_tasks.tasks import quantity
from mcp_tasks.tasks.tools import ToolSpec

logger = logging.getLogger("mcp_tasks.runner")

STDERR_TAIL_BYTES: Final = 4096
"""How much of a tool's stderr ends up in a result or message, in bytes."""
STDERR_LOG_MAX_BYTES: Final = 1024 * 1024
"""Largest stderr file kept per running tool, in bytes; `trim_log` cuts it back to its tail."""
ADOPTED_POLL_S: Final = 0.2
"""How often an adopted process (not our child: no exit notification) is checked for exit, in seconds."""
_PASSTHROUGH_ENV: Final = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV", "SYSTEMROOT")


def memory_limit_bytes(tool: ToolSpec) -> int | None:
    """`spec.container.resources.limits.memory` in bytes (rounded down), or `None` without one."""
    resources = tool.manifest.container.resources
    limit = resources.limits.get("memory") if resources is not None else None
    return None if limit is None else int(quantity.value_of(limit))


def _address_space_limit(tool: ToolSpec) -> Callable[[], None] | None:
    """What the child runs before `exec` to apply the tool's memory limit: `RLIMIT_AS` (soft and hard) at
    `limits.memory`, or nothing without a limit. An address-space limit, not a cgroup: it needs no
    privilege and no systemd, counts virtual memory (so it is stricter than a container's limit), and a
    tool past it sees allocations fail (Python: `MemoryError`) instead of being killed (docs/tool-runtime.md §1).
    """
    limit = memory_limit_bytes(tool)
    if limit is None:
        return None
    # Bound before the fork: the child only makes one system call (no import, no lock taken).
    return functools.partial(resource.setrlimit, resource.RLIMIT_AS, (limit, limit))


def command_for(tool: ToolSpec) -> list[str]:
    """The argv the embedded runner executes for `tool`."""
    command = list(tool.manifest.container.command)
    if command[0] in {"python", "python3"}:
        command[0] = sys.executable
    return command


async def _wait_for_exit(pid: int, identity: str) -> None:
    """Wait until process `pid` of `identity`, not our child, has exited (a pidfd where Linux has one)."""
    try:
        descriptor = os.pidfd_open(pid)
    except (AttributeError, OSError):
        descriptor = None
    if descriptor is not None:
        try:
            if identity_of(pid) != identity:  # the pid was reused before we opened it: ours is gone
                return
            exited = asyncio.Event()
            loop = asyncio.get_running_loop()
            loop.add_reader(descriptor, exited.set)  # a pidfd becomes readable when its process ends
            try:
                await exited.wait()
            finally:
                loop.remove_reader(descriptor)
        finally:
            os.close(descriptor)
        return
    while identity_of(pid) == identity:  # noqa: ASYNC110 - without a pidfd, polling is the only way
        await asyncio.sleep(ADOPTED_POLL_S)


async def _wait_for_child(process: subprocess.Popen[bytes]) -> int:
    """Wait until our child `process` has exited, then reap it; its exit code (negative: killed by that signal).

    A pidfd tells the loop when (Linux); elsewhere the child is polled every `ADOPTED_POLL_S`.
    """
    if process.poll() is not None:
        return process.returncode
    try:
        descriptor = os.pidfd_open(process.pid)
    except (AttributeError, OSError):
        descriptor = None
    if descriptor is None:
        while process.poll() is None:  # noqa: ASYNC110 - without a pidfd, polling is the only way
            await asyncio.sleep(ADOPTED_POLL_S)
        return process.returncode
    try:
        exited = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_reader(descriptor, exited.set)  # a pidfd becomes readable when its process ends
        try:
            if process.poll() is None:
                await exited.wait()
        finally:
            loop.remove_reader(descriptor)
    finally:
        os.close(descriptor)
    return process.wait()  # it has exited: reaps at once


async def stop_group(pid: int, identity: str, grace_s: float) -> None:
    """SIGTERM the process group that `pid` (of `identity`) leads, wait `grace_s`, then SIGKILL; not our child."""
    if not signal_group(pid, identity, signal.SIGTERM):
        return
    try:
        async with asyncio.timeout(grace_s):
            await _wait_for_exit(pid, identity)
    except TimeoutError:
        logger.warning("tool process %s ignored SIGTERM for %.1fs; killing it", pid, grace_s)
        signal_group(pid, identity, signal.SIGKILL)
        await _wait_for_exit(pid, identity)


class ToolProcess:
    """A running tool process and the tail of what it wrote to stderr.

    Use `start()`, then `wait()`; `stop(grace_s)` sends SIGTERM to the process group, waits up to
    `grace_s` seconds, then SIGKILL. `ToolProcess.adopt` wraps a process a previous runner started
    (after a crash), which this runner can watch and stop but not reap: its exit code is unknown.

    stderr goes to `log_path`, a file and not a pipe, so a tool outlives a crash of the server that
    started it (a write to a pipe without reader would fail) and a restarted server still has its
    tail. `trim_log()` keeps the file under `STDERR_LOG_MAX_BYTES`.
    """

    def __init__(self, tool: ToolSpec, extra_env: Mapping[str, str], log_path: Path) -> None:
        self.tool = tool
        self.extra_env = dict(extra_env)
        self.log_path = log_path
        self._process: subprocess.Popen[bytes] | None = None
        self._adopted: tuple[int, str] | None = None  # (pid, identity) of a process we did not start

    @classmethod
    def adopt(cls, tool: ToolSpec, pid: int, identity: str, log_path: Path) -> ToolProcess:
        """A handle on live process `pid` (of `identity`) that a previous runner started for `tool`."""
        process = cls(tool, {}, log_path)
        process._adopted = (pid, identity)
        return process

    async def start(self) -> None:
        """Spawn the process.

        Raises:
            OSError: the command cannot be executed (missing file, no permission).
        """
        env = {key: os.environ[key] for key in _PASSTHROUGH_ENV if key in os.environ}
        env.update({item.name: item.value for item in self.tool.manifest.container.env if item.value is not None})
        env.update(self.extra_env)
        env["PYTHONUNBUFFERED"] = "1"
        container = self.tool.manifest.container
        cwd = container.working_dir or self.tool.base_dir
        if cwd is not None and self.tool.base_dir is not None:
            cwd = str(Path(self.tool.base_dir, cwd))
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log_fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o600)
        try:
            # `subprocess.Popen`, not asyncio's subprocess transport: closing that transport (the loop
            # ending, or its collection) kills a child still running, and a stopping server hands its
            # runs to the next start instead (`Supervisor._stop_on_shutdown`). Nothing here is tied to
            # this process: stdin and stdout are /dev/null, stderr a file, a session of its own.
            self._process = subprocess.Popen(  # noqa: ASYNC220 - asyncio forks in the loop thread too
                command_for(self.tool),
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log_fd,
                start_new_session=True,
                preexec_fn=_address_space_limit(self.tool),  # noqa: PLW1509 - one setrlimit, no lock taken
            )
        finally:
            os.close(log_fd)

    worker_lost: bool = False
    """A process of its own is never lost while its runner lives (cf. `WarmRun.worker_lost`)."""
    delivered: bool = True
    """A process of its own always got its call (cf. `WarmRun.delivered`)."""

    @property
    def pid(self) -> int | None:
        """The process id, once started (or adopted)."""
        if self._adopted is not None:
            return self._adopted[0]
        return None if self._process is None else self._process.pid

    def trim_log(self) -> None:
        """Keep the stderr file bounded: past `STDERR_LOG_MAX_BYTES`, keep only its last `STDERR_TAIL_BYTES`."""
        with contextlib.suppress(OSError):
            if self.log_path.stat().st_size > STDERR_LOG_MAX_BYTES:
                tail = self._read_tail()
                with self.log_path.open("r+b") as handle:
                    handle.truncate(0)
                    handle.write(tail)  # the tool appends (O_APPEND): its next writes land after this

    def _read_tail(self) -> bytes:
        with self.log_path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - STDERR_TAIL_BYTES))
            return handle.read()

    def stderr_tail(self) -> str:
        """The last ≤4 KiB of stderr, decoded leniently ("" when there is none)."""
        try:
            return self._read_tail().decode("utf-8", "replace").strip()
        except OSError:
            return ""

    def discard_log(self) -> None:
        """Delete the stderr file once the run is concluded."""
        with contextlib.suppress(OSError):
            self.log_path.unlink()

    async def wait(self) -> int | None:
        """Wait for exit and return the exit code (negative: killed by that signal; `None`: adopted, unknown).

        Then stop whatever the tool left behind in its process group.
        """
        if self._adopted is not None:
            await _wait_for_exit(*self._adopted)
            return None
        if self._process is None:
            raise RuntimeError("process not started")
        code = await _wait_for_child(self._process)
        self._signal_group(signal.SIGKILL)
        return code

    def _signal(self, signum: int) -> None:
        if self._process is not None and self._process.poll() is None:
            self._signal_group(signum)

    def _signal_group(self, signum: int) -> None:
        if self._process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._process.pid, signum)

    async def stop(self, grace_s: float) -> None:
        """SIGTERM the process group, wait `grace_s` seconds, then SIGKILL; return once it has exited."""
        if self._adopted is not None:
            await stop_group(*self._adopted, grace_s)
            return
        if self._process is None:
            return
        if self._process.poll() is not None:
            await self.wait()
            return
        self._signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(grace_s):
                await self.wait()
        except TimeoutError:
            logger.warning("tool process %s ignored SIGTERM for %.1fs; killing it", self.pid, grace_s)
            self._signal(signal.SIGKILL)
        await self.wait()
