"""The pod shape on the embedded runner (issue 20 item 4): `resources.limits.memory` becomes the tool process's
address-space limit; the Kubernetes-only fields are ignored and said so once, at load."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import aiohttp
import pytest
import yaml

from mcp_tasks.cli.settings import Settings, validate
from tests.conftest import REPO, McpHttp, server_settings, serving

SHAPED_HOG = {
    "apiVersion": "mcptasks.io/v1alpha1",
    "kind": "McpTool",
    "metadata": {"name": "memory-hog"},
    "spec": {
        "name": "memory_hog",
        "description": "Holds `mebibytes` MiB at once.",
        "inputSchema": {"type": "object"},
        "execution": {"taskPolicy": "required"},
        "container": {
            "command": ["python", "tools.py", "memory_hog"],
            "workingDir": str(REPO / "tests" / "tools"),
            "resources": {"requests": {"cpu": "100m"}, "limits": {"memory": "256Mi"}},
            "nodeSelector": {"pool": "gpu"},
            "env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
        },
    },
}


def hog_settings(tmp_path: Path) -> Settings:
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "hog.yaml").write_text(yaml.safe_dump(SHAPED_HOG))
    settings = server_settings(tmp_path / "data")
    return validate(replace(settings, serve=replace(settings.serve, tools_dirs=(tools,))))


async def test_a_memory_limit_stops_a_tool_that_allocates_past_it_and_ignored_fields_are_logged_once(
    tmp_path: Path, http_session: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    """Our own choice (docs/tool-runtime.md §1): past `limits.memory` an allocation fails (RLIMIT_AS), the
    process exits without a result, and the task ends `completed` with `isError: true` and the stderr tail
    (the §6 outcome); below it the same tool runs. Kubernetes-only fields are named in one warning."""
    with caplog.at_level(logging.WARNING, logger="mcp_tasks.store.manifests"):
        async with serving(hog_settings(tmp_path)) as server:
            mcp = McpHttp(http_session, server.url, changed=server.changed)
            small = await mcp.start_task("memory_hog", {"mebibytes": 16})
            done = await mcp.wait_status(small, "completed", "failed")
            assert done["result"]["content"][0]["text"] == "held 16 MiB", done
            big = await mcp.start_task("memory_hog", {"mebibytes": 512})
            done = await mcp.wait_status(big, "completed", "failed")
    assert done["status"] == "completed" and done["result"]["isError"] is True, done
    text = done["result"]["content"][0]["text"]
    assert "exited with code 1 without a result" in text and "MemoryError" in text, text
    warnings = [r.getMessage() for r in caplog.records if "embedded runner ignores" in r.getMessage()]
    assert len(warnings) == 1, warnings
    ignored = warnings[0].split("spec.container: ", 1)[1].split(" (it applies")[0].split(", ")
    assert ignored == ["nodeSelector", "env[TOKEN].valueFrom", "resources.requests.cpu"], ignored
