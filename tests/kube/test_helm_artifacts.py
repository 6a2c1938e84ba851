"""The chart with artifacts in S3-compatible object storage (`artifacts.s3.*`), rendered by the real `helm`.

Our own choice (docs/kubernetes.md, "Artifacts in object storage"): with a bucket the chart renders no
PersistentVolumeClaim (many clusters have no ReadWriteMany class), passes the bucket settings to the
gateway and the operator, takes the access key from an existing Secret, and shares the requestState key
through a Secret of its own.
"""

from __future__ import annotations

import base64
import secrets
from typing import Any

import yaml

from mcp_tasks.worker.warm_auth import WarmCallSigner
from tests.controlplane.cluster import ControlPlane
from tests.kube.test_helm import helm_template

S3_VALUES = (
    "--set",
    "auth.existingSecret=tokens",
    "--set",
    "artifacts.s3.bucket=mcp-artifacts",
    "--set",
    "artifacts.s3.prefix=prod/",
    "--set",
    "artifacts.s3.endpoint=http://seaweedfs.storage.svc:8333",
    "--set",
    "artifacts.s3.region=eu-west-1",
    "--set",
    "artifacts.s3.pathStyle=true",
    "--set",
    "artifacts.s3.sse=true",
    "--set",
    "artifacts.s3.existingSecret=mcp-tasks-s3",
)


def rendered(plane: ControlPlane, *args: str) -> list[dict[str, Any]]:
    result = helm_template(plane, *args)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def deployment(documents: list[dict[str, Any]], suffix: str) -> dict[str, Any]:
    return next(d for d in documents if d["kind"] == "Deployment" and d["metadata"]["name"].endswith(suffix))


def test_s3_values_render_no_claim_and_give_both_components_the_bucket(control_plane: ControlPlane) -> None:
    documents = rendered(control_plane, *S3_VALUES)
    assert not [d for d in documents if d["kind"] == "PersistentVolumeClaim"]
    for component in ("-gateway", "-operator"):
        pod = deployment(documents, component)["spec"]["template"]["spec"]
        container = pod["containers"][0]
        env = {item["name"]: item for item in container["env"]}
        assert {name: env[name].get("value") for name in env if name.startswith("MCPTASKS_S3_")} == {
            "MCPTASKS_S3_BUCKET": "mcp-artifacts",
            "MCPTASKS_S3_PREFIX": "prod/",
            "MCPTASKS_S3_ENDPOINT_URL": "http://seaweedfs.storage.svc:8333",
            "MCPTASKS_S3_REGION": "eu-west-1",
            "MCPTASKS_S3_PATH_STYLE": "true",
            "MCPTASKS_S3_SSE": "true",
            "MCPTASKS_S3_ACCESS_KEY_ID": None,
            "MCPTASKS_S3_SECRET_ACCESS_KEY": None,
        }
        assert env["MCPTASKS_S3_ACCESS_KEY_ID"]["valueFrom"] == {
            "secretKeyRef": {"name": "mcp-tasks-s3", "key": "accessKeyId"}
        }
        assert env["MCPTASKS_S3_SECRET_ACCESS_KEY"]["valueFrom"] == {
            "secretKeyRef": {"name": "mcp-tasks-s3", "key": "secretAccessKey"}
        }
        volumes = {volume["name"]: volume for volume in pod["volumes"]}
        assert "persistentVolumeClaim" not in volumes["data"] and "emptyDir" in volumes["data"]
        mounts = {mount["mountPath"]: mount for mount in container["volumeMounts"]}
        if component == "-operator":  # the operator never reads the gateways' requestState key
            assert "request-state" not in volumes and "/var/lib/mcptasks/request-state.key" not in mounts
            continue
        assert volumes["request-state"]["secret"]["secretName"] == "r-mcp-tasks-request-state"
        assert mounts["/var/lib/mcptasks/request-state.key"]["subPath"] == "request-state.key"
    key_secret = next(d for d in documents if d["kind"] == "Secret" and d["metadata"]["name"].endswith("request-state"))
    assert key_secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


def test_without_s3_the_claim_is_rendered_and_no_s3_variable_is_set(control_plane: ControlPlane) -> None:
    documents = rendered(control_plane, "--set", "auth.existingSecret=tokens")
    assert [d["metadata"]["name"] for d in documents if d["kind"] == "PersistentVolumeClaim"] == ["r-mcp-tasks-data"]
    assert [d["metadata"]["name"] for d in documents if d["kind"] == "Secret"] == ["r-mcp-tasks-warm-call"]
    for component in ("-gateway", "-operator"):
        container = deployment(documents, component)["spec"]["template"]["spec"]["containers"][0]
        assert not [item for item in container["env"] if item["name"].startswith("MCPTASKS_S3_")]


def test_the_warm_call_key_is_a_kept_secret_mounted_in_the_operator_and_gateways_only(
    control_plane: ControlPlane,
) -> None:
    """Our choice (docs/security.md, "Warm workers"): an Ed25519 key Helm generates once, which the operator
    and the gateways read from a mounted file; no other pod of the release mounts it, and it is not the
    requestState key."""
    documents = rendered(control_plane, *S3_VALUES)
    (key_secret,) = [d for d in documents if d["kind"] == "Secret" and d["metadata"]["name"] == "r-mcp-tasks-warm-call"]
    assert key_secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    pem = base64.b64decode(key_secret["data"]["warm-call.key"])
    assert WarmCallSigner.from_pem(pem).public_pem.startswith("-----BEGIN PUBLIC KEY-----")
    request_state = next(
        d for d in documents if d["kind"] == "Secret" and d["metadata"]["name"].endswith("request-state")
    )
    assert base64.b64decode(request_state["data"]["request-state.key"]) != pem
    mounting = set()
    for document in documents:
        pod = ((document.get("spec") or {}).get("template") or {}).get("spec") or {}
        for volume in pod.get("volumes") or []:
            if (volume.get("secret") or {}).get("secretName") == "r-mcp-tasks-warm-call":
                mounting.add(document["metadata"]["name"])
                (container,) = pod["containers"]
                env = {item["name"]: item.get("value") for item in container["env"]}
                assert env["MCPTASKS_WARM_CALL_KEY_FILE"] == "/etc/mcptasks/warm-call/warm-call.key"
                mounts = {mount["name"]: mount for mount in container["volumeMounts"]}
                assert mounts[volume["name"]] == {
                    "name": volume["name"],
                    "mountPath": "/etc/mcptasks/warm-call",
                    "readOnly": True,
                }
    assert mounting == {"r-mcp-tasks-gateway", "r-mcp-tasks-operator"}


def test_without_a_key_secret_the_sdk_chain_is_left_to_find_credentials(control_plane: ControlPlane) -> None:
    """The pod's cloud identity (e.g. IRSA on the ServiceAccount): no key variables at all."""
    documents = rendered(
        control_plane, "--set", "auth.existingSecret=tokens", "--set", "artifacts.s3.bucket=mcp-artifacts"
    )
    container = deployment(documents, "-operator")["spec"]["template"]["spec"]["containers"][0]
    names = {item["name"] for item in container["env"]}
    assert "MCPTASKS_S3_BUCKET" in names and "MCPTASKS_S3_ACCESS_KEY_ID" not in names


def test_an_invalid_bucket_name_fails_naming_the_key(control_plane: ControlPlane) -> None:
    result = helm_template(control_plane, "--set", "auth.existingSecret=tokens", "--set", "artifacts.s3.bucket=No_Such")
    assert result.returncode != 0
    assert "at '/artifacts/s3/bucket'" in result.stderr, result.stderr


def test_s3_manifests_are_accepted_by_the_api_server(control_plane: ControlPlane) -> None:
    namespace = f"dry-{secrets.token_hex(3)}"
    control_plane.kubectl("create", "namespace", namespace)
    result = helm_template(control_plane, *S3_VALUES, "--namespace", namespace)
    assert result.returncode == 0, result.stderr
    out = control_plane.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-", input_text=result.stdout)
    assert "secret/r-mcp-tasks-request-state created (server dry run)" in out
    assert "deployment.apps/r-mcp-tasks-operator created (server dry run)" in out
