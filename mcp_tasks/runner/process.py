"""One tool process: spawn the manifest's command, keep a bounded tail of its stderr, stop it gracefully.

The embedded runner's mapping from an McpTool container to a local process: `spec.container.command`
is run in the manifest's folder (or `workingDir`), with `spec.container.env` and the runtime-contract
variables; a first element of `python`/`python3` means this server's own interpreter, so the
`mcp_tasks.runtime` helper is importable. The image is not used. Each process leads its own process
group, so a stop reaches its children too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from mcp_tasks.tasks.tools import ToolSpec

logger = logging.getLogger("mcp_tasks.runner")

STDERR_TAIL_BYTES: Final = 4096
STDERR_DRAIN_S: Final = 0.5
_PASSTHROUGH_ENV: Final = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV", "SYSTEMROOT")


def command_for(tool: ToolSpec) -> list[str]:
    """The argv the embedded runner executes for `tool`."""
    command = list(tool.manifest.container.command)
    if command[0] in {"python", "python3"}:
        command[0] = sys.executable
    return command


class ToolProcess:
    """A running tool process and the tail of what it wrote to stderr.

    Use `start()`, then `wait()`; `stop(grace_s)` sends SIGTERM to the process group, waits up to
    `grace_s` seconds, then SIGKILL.
    """

    def __init__(self, tool: ToolSpec, extra_env: Mapping[str, str]) -> None:
        self.tool = tool
        self.extra_env = dict(extra_env)
        self._process: asyncio.subprocess.Process | None = None
        self._tail: deque[bytes] = deque()
        self._tail_size = 0
        self._drain: asyncio.Task[None] | None = None
        self._stderr_transport: asyncio.ReadTransport | None = None

    async def start(self) -> None:
        """Spawn the process.

        Raises:
            OSError: the command cannot be executed (missing file, no permission).
        """
        env = {key: os.environ[key] for key in _PASSTHROUGH_ENV if key in os.environ}
        env.update({item.name: item.value for item in self.tool.manifest.container.env})
        env.update(self.extra_env)
        env["PYTHONUNBUFFERED"] = "1"
        container = self.tool.manifest.container
        cwd = container.working_dir or self.tool.base_dir
        if cwd is not None and self.tool.base_dir is not None:
            cwd = str(Path(self.tool.base_dir, cwd))
        # stderr goes through a pipe of our own, not asyncio's: asyncio's Process.wait() also waits for
        # its pipes to close, which a child that escaped the process group could postpone forever.
        read_fd, write_fd = os.pipe()
        try:
            self._process = await asyncio.create_subprocess_exec(
                *command_for(self.tool),
                cwd=cwd,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=write_fd,
                start_new_session=True,
            )
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        reader = asyncio.StreamReader()
        self._stderr_transport, _ = await asyncio.get_running_loop().connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_fd, "rb", buffering=0)
        )
        self._drain = asyncio.create_task(self._read_stderr(reader), name=f"stderr-{self._process.pid}")

    @property
    def pid(self) -> int | None:
        """The process id, once started."""
        return None if self._process is None else self._process.pid

    async def _read_stderr(self, reader: asyncio.StreamReader) -> None:
        while chunk := await reader.read(1024):
            self._tail.append(chunk)
            self._tail_size += len(chunk)
            while self._tail_size - len(self._tail[0]) >= STDERR_TAIL_BYTES:
                self._tail_size -= len(self._tail.popleft())

    def stderr_tail(self) -> str:
        """The last ≤4 KiB of stderr, decoded leniently."""
        return b"".join(self._tail)[-STDERR_TAIL_BYTES:].decode("utf-8", "replace").strip()

    async def wait(self) -> int:
        """Wait for exit and return the exit code (negative: killed by that signal).

        Then stop whatever the tool left behind in its process group, and read what is left of stderr
        for at most `STDERR_DRAIN_S` (a child that escaped the group may hold the pipe open forever).
        """
        if self._process is None:
            raise RuntimeError("process not started")
        code = await self._process.wait()
        self._signal_group(signal.SIGKILL)
        if self._drain is not None:
            done, _ = await asyncio.wait({self._drain}, timeout=STDERR_DRAIN_S)
            if not done:
                self._drain.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._drain
        if self._stderr_transport is not None:
            self._stderr_transport.close()
        return code

    def _signal(self, signum: int) -> None:
        if self._process is not None and self._process.returncode is None:
            self._signal_group(signum)

    def _signal_group(self, signum: int) -> None:
        if self._process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._process.pid, signum)

    async def stop(self, grace_s: float) -> None:
        """SIGTERM the process group, wait `grace_s` seconds, then SIGKILL; return once it has exited and is reaped."""
        if self._process is None:
            return
        if self._process.returncode is not None:
            await self.wait()
            return
        self._signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(grace_s):
                await self._process.wait()
        except TimeoutError:
            logger.warning("tool process %s ignored SIGTERM for %.1fs; killing it", self._process.pid, grace_s)
            self._signal(signal.SIGKILL)
        await self.wait()
