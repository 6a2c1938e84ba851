"""Real MCP servers nobody here wrote, installed from their registries at pinned versions, for the McpServer tests.

- `@modelcontextprotocol/server-everything` 2026.8.31 (npm, speaks 2025-11-25 with `initialize`; stdio and
  Streamable HTTP): installed with Node 22 by `tests.clients.typescript.installed_pin`, checked against the
  integrity npm records, into `$XDG_CACHE_HOME/mcp-tasks/server-everything-2026.8.31` (6-9 s cold).
- `mcp-server-time` 2026.10.19 (PyPI, stdio, speaks 2026-07-28 with `server/discover`): its wheel is
  downloaded and checked against the sha256 pinned here, then installed with its dependencies into a venv of
  its own, `$XDG_CACHE_HOME/mcp-tasks/mcp-server-time-2026.10.19` (10.6 s cold): its own `mcp` release must
  not meet ours.

Each is installed once, on first use; a test skips saying why when npm is missing (pip comes with Python).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Final

from tests.clients.typescript import Pin, installed_pin, node_of

EVERYTHING: Final = Pin(
    "@modelcontextprotocol/server-everything",
    "2026.8.31",
    "sha512-5U3OZh8Xq0Li4nA26l6uNvV9/1suMDuWSn+NjLZIhzinhMY6N3A4DCrxVecBGPf2PsNFKTEv5krxGPRwzxc7jQ==",
    "server-everything",
)
TIME_VERSION: Final = "2026.10.19"
TIME_WHEEL_SHA256: Final = "5c099a001c6ca78260bda419f2e9b2aabee1adc4fe6ca56d8959871ad8da58a1"


def _cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "mcp-tasks"


def everything_command(transport: str = "stdio") -> list[str]:
    """argv of server-everything on `transport` (`stdio` or `streamableHttp`), installed if need be."""
    cache = installed_pin(EVERYTHING)
    script = cache / "node_modules" / EVERYTHING.name / "dist" / "index.js"
    return [str(node_of(cache)), str(script), transport]


def time_command() -> list[str]:
    """argv of `mcp-server-time` (stdio), installed if need be."""
    venv = _cache() / f"mcp-server-time-{TIME_VERSION}"
    binary = venv / "bin" / "mcp-server-time"
    if binary.exists():
        return [str(binary)]
    partial = venv.with_name(venv.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(partial)], check=True, timeout=300)
    pip = [str(partial / "bin" / "python"), "-m", "pip", "--quiet", "--disable-pip-version-check"]
    wheels = partial / "download"
    subprocess.run(
        [*pip, "download", "--no-deps", "--dest", str(wheels), f"mcp-server-time=={TIME_VERSION}"],
        check=True,
        timeout=600,
    )
    (wheel,) = wheels.glob("*.whl")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert digest == TIME_WHEEL_SHA256, f"{wheel.name} has sha256 {digest}, not the pinned {TIME_WHEEL_SHA256}"
    subprocess.run([*pip, "install", str(wheel)], check=True, timeout=600)
    shutil.rmtree(wheels)
    partial.rename(venv)  # the venv's scripts name their interpreter by path: rewrite them for the final folder
    for script in (venv / "bin").iterdir():
        if script.is_file() and not script.is_symlink():
            text = script.read_bytes()
            if text.startswith(b"#!") and str(partial).encode() in text:
                script.write_bytes(text.replace(str(partial).encode(), str(venv).encode()))
    return [str(binary)]
