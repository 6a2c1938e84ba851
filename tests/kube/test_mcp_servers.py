"""McpServer on the real control plane: the CRD (schema, CEL rules, status subresource, printer columns), the
catalog serving its discovered tools from status, and the per-call Job's pod shape (docs/mcp-servers.md,
Kubernetes). Discovery and calls through a real server's pod are the real-node tier's (`tests/node/`).
"""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from tests.controlplane.cluster import ControlPlane

EVERYTHING: dict[str, Any] = {
    "apiVersion": "mcptasks.io/v1alpha1",
    "kind": "McpServer",
    "metadata": {"name": "everything"},
    "spec": {
        "transport": "stdio",
        "container": {
            "image": "registry.example/mcp/server-everything:2026.8.31",
            "command": ["mcp-server-everything", "stdio"],
        },
        "tools": {"get-env": {"expose": False}},
    },
}


def _apply(plane: ControlPlane, namespace: str, *documents: dict[str, Any]) -> str:
    return plane.kubectl("apply", "-n", namespace, "-f", "-", input_text=yaml.safe_dump_all(documents))


def test_the_crd_refuses_what_the_operator_could_not_run(control_plane: ControlPlane, namespace: str) -> None:
    no_command = json.loads(json.dumps(EVERYTHING))
    no_command["metadata"]["name"] = "no-command"
    del no_command["spec"]["container"]["command"]
    with pytest.raises(subprocess.CalledProcessError) as refused:
        _apply(control_plane, namespace, no_command)
    assert "spec.container.command: Required value" in str(refused.value.stderr)
    http_without_port = {**EVERYTHING, "metadata": {"name": "http"}, "spec": {**EVERYTHING["spec"]}}
    http_without_port["spec"]["transport"] = "streamable-http"
    with pytest.raises(subprocess.CalledProcessError) as refused:
        _apply(control_plane, namespace, http_without_port)
    assert "transport streamable-http needs spec.http" in str(refused.value.stderr)
    no_image = json.loads(json.dumps(EVERYTHING))
    no_image["metadata"]["name"] = "no-image"
    del no_image["spec"]["container"]["image"]
    with pytest.raises(subprocess.CalledProcessError) as refused:
        _apply(control_plane, namespace, no_image)
    assert "image" in str(refused.value.stderr)


def test_status_is_a_subresource_and_kubectl_get_shows_transport_tools_and_ready(
    control_plane: ControlPlane, namespace: str
) -> None:
    _apply(control_plane, namespace, EVERYTHING)
    since = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = {
        "protocolVersion": "2025-11-25",
        "serverInfo": {"name": "mcp-servers/everything", "version": "2.0.0", "futureField": 1},
        "tools": [{"name": "echo", "inputSchema": {"type": "object"}, "x-vendor": {"kept": True}}],
        "toolCount": 1,
        "servedTools": ["echo"],
        "observedGeneration": 1,
        "conditions": [
            {
                "type": "Discovered",
                "status": "True",
                "reason": "Discovered",
                "lastTransitionTime": since,
            },
            {"type": "Ready", "status": "True", "reason": "Served", "lastTransitionTime": since},
        ],
    }
    control_plane.kubectl(
        "patch", "-n", namespace, "mcpserver/everything", "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": status}),
    )  # fmt: skip
    read = json.loads(control_plane.kubectl("get", "-n", namespace, "mcpserver/everything", "-o", "json"))
    assert read["status"]["tools"][0]["x-vendor"] == {"kept": True}  # a Tool is kept verbatim
    assert read["status"]["serverInfo"]["futureField"] == 1
    assert read["spec"]["transport"] == "stdio"
    table = control_plane.kubectl("get", "-n", namespace, "mcpservers").splitlines()
    assert table[0].split()[:4] == ["NAME", "TRANSPORT", "TOOLS", "READY"], table
    assert table[1].split()[:4] == ["everything", "stdio", "1", "True"], table
    wide = control_plane.kubectl("get", "-n", namespace, "mcps", "-o", "wide").splitlines()
    assert "2025-11-25" in wide[1] and "mcp-servers/everything" in wide[1], wide
    # a spec change through the main resource never touches status (the subresource is the operator's)
    control_plane.kubectl(
        "patch", "-n", namespace, "mcpserver/everything", "--type=merge", "-p", json.dumps({"status": {"toolCount": 9}})
    )
    read = json.loads(control_plane.kubectl("get", "-n", namespace, "mcpserver/everything", "-o", "json"))
    assert read["status"]["toolCount"] == 1
