"""Arguments above the inline cap on Kubernetes: an artifact of their task, read back by the run, gone with it.

Both deployments accept the same argument sizes (docs/tool-runtime.md §Argument sizes): up to the request
body limit, with one JSON-RPC error above it. Runs on the real control plane (gateway, operator, process
node running the Job's pod as a local process) and a real embedded server.
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from mcp_types import jsonrpc

from tests.conftest import McpHttp, Reply, server_settings, serving
from tests.controlplane.cluster import ControlPlane
from tests.kube.conftest import Gateways, Operators, client, get_object, until

WAIT_S = 60.0
TOOLS = Path(__file__).resolve().parents[1] / "tools"


def digest_tool() -> dict[str, Any]:
    """An McpTool `arguments_digest` (tests/tools): answers the length and SHA-256 of the arguments it got,
    kept 10 s after it ends (time for a loaded machine to see it finish); its `workingDir` is tests/tools,
    for local processes."""
    return {
        "apiVersion": "mcptasks.io/v1alpha1",
        "kind": "McpTool",
        "metadata": {"name": "arguments-digest"},
        "spec": {
            "name": "arguments_digest",
            "description": "The length and SHA-256 of its arguments as compact JSON.",
            "inputSchema": {"type": "object"},
            "execution": {"taskPolicy": "required", "ttlMs": 10_000},
            "container": {
                "image": "ghcr.io/mcp-tasks/tests:0.1.0",
                "command": ["python", "tools.py", "arguments_digest"],
                "workingDir": str(TOOLS),
            },
        },
    }


def large_arguments(size: int) -> dict[str, Any]:
    """An argument object of `size` bytes of compact JSON (a few bytes less), with escapes, non-ASCII
    text and nesting."""
    line = "".join(chr(0x20 + (i * 7919) % 0x5F) for i in range(1000)) + "é✓\n"
    arguments: dict[str, Any] = {"nested": {"n": 2**53, "list": [1.5, None, True, "ü"]}, "blob": line}
    arguments["blob"] = line * (size // len(line) + 1)
    while (excess := len(compact(arguments)) - size) > 0:
        arguments["blob"] = arguments["blob"][: -max(1, excess // 2)]
    return arguments


async def call(mcp: McpHttp, name: str, arguments: dict[str, Any]) -> Reply:
    """`tools/call` with a large body, streamed from memory (as aiohttp asks for bodies over 1 MiB)."""
    body, headers = mcp.prepare("tools/call", {"name": name, "arguments": arguments})
    return await mcp.post(io.BytesIO(body.encode()), headers)


def compact(arguments: dict[str, Any]) -> bytes:
    return json.dumps(arguments, separators=(",", ":"), ensure_ascii=False).encode()


async def test_900_kib_of_arguments_run_as_a_job_and_their_artifact_goes_with_the_task(
    gateways: Gateways,
    operators: Operators,
    control_plane: ControlPlane,
    namespace: str,
    tmp_path: Path,
    http_session: aiohttp.ClientSession,
) -> None:
    control_plane.kubectl("apply", "-n", namespace, "-f", "-", input_text=yaml.safe_dump(digest_tool()))
    operators.start()
    gateway = await gateways.start()
    await until(lambda: gateway.services.catalog.get_tool("arguments_digest") is not None)
    arguments = large_arguments(900 * 1024)
    data = compact(arguments)
    assert len(data) > 900 * 1000

    task_id = await client(http_session, gateway).start_task("arguments_digest", arguments)

    stored = get_object(control_plane, namespace, task_id)
    assert stored is not None
    assert "arguments" not in stored["spec"] or stored["spec"]["arguments"] == {}
    ref = stored["spec"]["argumentsRef"]
    digest = hashlib.sha256(data).hexdigest()
    assert ref == {"name": f"arguments-{digest}.json", "sizeBytes": len(data), "sha256": digest}
    assert len(json.dumps(stored)) < 4096, "the McpTask holds a reference, not the 900 KiB"
    folder = tmp_path / "artifacts" / task_id
    assert (folder / ref["name"]).read_bytes() == data

    done = await client(http_session, gateway).wait_status(task_id, "completed", "failed", timeout_s=WAIT_S)
    assert done["status"] == "completed", done
    text = done["result"]["content"][0]["text"]
    assert text == f"{len(data)} bytes sha256={digest}", "the tool got them intact"

    read = await client(http_session, gateway).request(
        "resources/read", {"uri": f"mcptasks://artifacts/{task_id}/{ref['name']}"}
    )
    assert read.result["contents"][0]["text"].encode() == data, "the owner can read them back"

    await until(lambda: get_object(control_plane, namespace, task_id) is None, timeout_s=WAIT_S)  # ttlMs 10 s
    await until(lambda: not folder.exists(), timeout_s=WAIT_S)


async def test_small_arguments_stay_inline_in_the_mcptask(
    gateways: Gateways, control_plane: ControlPlane, namespace: str, tmp_path: Path, http_session: aiohttp.ClientSession
) -> None:
    gateway = await gateways.start()
    arguments = large_arguments(60 * 1024)  # under the 64 KiB inline cap
    task_id = await client(http_session, gateway).start_task("sleeper", {**arguments, "seconds": 0})
    stored = get_object(control_plane, namespace, task_id)
    assert stored is not None and "argumentsRef" not in stored["spec"]
    assert stored["spec"]["arguments"]["blob"] == arguments["blob"]
    assert not (tmp_path / "artifacts" / task_id).exists()


async def test_arguments_over_the_body_limit_get_the_same_error_in_both_deployments(
    gateways: Gateways, namespace: str, tmp_path: Path, http_session: aiohttp.ClientSession
) -> None:
    kube = await gateways.start()
    replies = {}
    async with serving(server_settings(tmp_path / "embedded")) as embedded:
        for where, url in (("kubernetes", kube.url), ("embedded", embedded.url)):
            mcp = McpHttp(http_session, url)
            under = await call(mcp, "sleeper", {**large_arguments(1000 * 1024), "seconds": 0})
            assert under.result["resultType"] == "task", (where, under.body)
            for size in (1100 * 1024, 20 * 1024 * 1024):
                reply = await call(mcp, "sleeper", {**large_arguments(size), "seconds": 0})
                replies[where, size] = (reply.status, reply.error)
    for size in (1100 * 1024, 20 * 1024 * 1024):
        status, error = replies["kubernetes", size]
        assert (status, error) == replies["embedded", size], size
        assert status == 413 and error["code"] == jsonrpc.INVALID_REQUEST
        assert error["message"] == "Request body exceeds 1048576 bytes; send less"


def refusing_policy(namespace: str) -> str:
    """A platform team's ValidatingAdmissionPolicy (and binding) refusing McpTasks of `arguments_digest`
    in `namespace`, with reason `Invalid` (the API server answers 422)."""
    name = f"no-digests-{namespace}"
    return yaml.safe_dump_all(
        [
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicy",
                "metadata": {"name": name},
                "spec": {
                    "failurePolicy": "Fail",
                    "matchConstraints": {
                        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                        "resourceRules": [
                            {
                                "apiGroups": ["mcptasks.io"],
                                "apiVersions": ["*"],
                                "operations": ["CREATE"],
                                "resources": ["mcptasks"],
                            }
                        ],
                    },
                    "validations": [
                        {
                            "expression": "object.spec.tool != 'arguments_digest'",
                            "message": "digests are not allowed here",
                            "reason": "Invalid",
                        }
                    ],
                },
            },
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicyBinding",
                "metadata": {"name": name},
                "spec": {"policyName": name, "validationActions": ["Deny"]},
            },
        ]
    )


async def test_a_task_the_cluster_refuses_says_why_and_leaves_no_arguments_behind(
    gateways: Gateways, control_plane: ControlPlane, namespace: str, tmp_path: Path, http_session: aiohttp.ClientSession
) -> None:
    """Arguments are written before the McpTask is POSTed: when the API server refuses the McpTask (an
    admission policy here), the client gets the policy's words as invalid params, and the artifact goes."""
    control_plane.kubectl("apply", "-n", namespace, "-f", "-", input_text=yaml.safe_dump(digest_tool()))
    policy = refusing_policy(namespace)
    control_plane.kubectl("apply", "-f", "-", input_text=policy)
    try:
        gateway = await gateways.start()
        await until(lambda: gateway.services.catalog.get_tool("arguments_digest") is not None)
        mcp = client(http_session, gateway)

        async def refused() -> Reply | None:  # the API server loads a new policy within a second or so
            reply = await call(mcp, "arguments_digest", {"small": True})
            return reply if "error" in reply.body else None

        small: Reply = await until(refused, timeout_s=WAIT_S)
        assert (
            small.error["code"] == jsonrpc.INVALID_PARAMS and "digests are not allowed here" in small.error["message"]
        )
        large = await call(mcp, "arguments_digest", large_arguments(900 * 1024))
        assert large.error["code"] == jsonrpc.INVALID_PARAMS, large.body
        assert "digests are not allowed here" in large.error["message"]
        artifacts = tmp_path / "artifacts"
        assert not artifacts.exists() or not any(artifacts.iterdir()), "the refused task's arguments are gone"
    finally:
        control_plane.kubectl("delete", "-f", "-", input_text=policy)
