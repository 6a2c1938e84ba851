"""The chart's TLS values for the worker API and warm workers (issue 21 item 6), as `helm template` renders them.

cert-manager's CRDs are not in the test cluster: its Certificates are checked by parsing what helm renders. The
operator serving HTTPS with such a Secret and a tool Pod verifying it is `tests/kube/test_worker_tls.py`.
"""

from __future__ import annotations

from typing import Any

from tests.controlplane.cluster import ControlPlane
from tests.kube.test_helm_artifacts import deployment, rendered

BASE = ("--set", "auth.existingSecret=tokens")
ISSUER = (
    "--set",
    "tls.certManager.issuerRef.name=internal-ca",
    "--set",
    "tls.certManager.issuerRef.kind=ClusterIssuer",
)


def operator_parts(documents: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The operator pod spec, its container and its environment (name → value)."""
    pod = deployment(documents, "-operator")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    return pod, container, {item["name"]: item.get("value") for item in container["env"]}


def test_without_tls_values_the_worker_api_stays_plain_http(control_plane: ControlPlane) -> None:
    documents = rendered(control_plane, *BASE)
    pod, container, env = operator_parts(documents)
    assert env["MCPTASKS_WORKER_URL"] == "http://r-mcp-tasks-operator.demo.svc:8081"
    assert not [name for name in env if "TLS" in name or name == "MCPTASKS_WORKER_CA_SECRET"]
    gateway = deployment(documents, "-gateway")["spec"]["template"]["spec"]["containers"][0]
    assert not [item for item in gateway["env"] if "TLS" in item["name"]]
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTP"
    assert "worker-api-tls" not in [volume["name"] for volume in pod["volumes"]]
    assert not [d for d in documents if d["kind"] == "Certificate"]


def test_an_existing_tls_secret_makes_the_operator_serve_https_and_tool_pods_verify_it(
    control_plane: ControlPlane,
) -> None:
    documents = rendered(control_plane, *BASE, "--set", "tls.workerApi.secretName=worker-cert")
    pod, container, env = operator_parts(documents)
    assert env["MCPTASKS_WORKER_URL"] == "https://r-mcp-tasks-operator.demo.svc:8081"
    assert env["MCPTASKS_WORKER_TLS_CERT_FILE"] == "/etc/mcptasks/worker-api-tls/tls.crt"
    assert env["MCPTASKS_WORKER_TLS_KEY_FILE"] == "/etc/mcptasks/worker-api-tls/tls.key"
    assert env["MCPTASKS_WORKER_CA_SECRET"] == "worker-cert", "tool pods mount its ca.crt"
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert container["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    (volume,) = [v for v in pod["volumes"] if v["name"] == "worker-api-tls"]
    assert volume["secret"]["secretName"] == "worker-cert"
    assert [item["key"] for item in volume["secret"]["items"]] == ["tls.crt", "tls.key"]
    assert {"name": "worker-api-tls", "mountPath": "/etc/mcptasks/worker-api-tls", "readOnly": True} in container[
        "volumeMounts"
    ]
    gateway = deployment(documents, "-gateway")["spec"]["template"]["spec"]
    assert "worker-api-tls" not in [volume["name"] for volume in gateway["volumes"]], "only the operator holds the key"
    assert not [d for d in documents if d["kind"] == "Certificate"]


def test_a_cert_manager_issuer_renders_a_certificate_for_the_operators_service(control_plane: ControlPlane) -> None:
    documents = rendered(control_plane, *BASE, *ISSUER, "--set", "tls.certManager.duration=720h")
    certificates = {d["metadata"]["name"]: d for d in documents if d["kind"] == "Certificate"}
    assert set(certificates) == {"r-mcp-tasks-worker-api", "r-mcp-tasks-warm-workers"}
    warm = certificates["r-mcp-tasks-warm-workers"]["spec"]
    assert (warm["secretName"], warm["dnsNames"]) == ("r-mcp-tasks-warm-workers-tls", ["mcp-tasks-warm-worker"])
    assert warm["issuerRef"] == {"name": "internal-ca", "kind": "ClusterIssuer"}
    certificate = certificates["r-mcp-tasks-worker-api"]
    assert certificate["apiVersion"] == "cert-manager.io/v1"
    spec = certificate["spec"]
    assert spec["secretName"] == "r-mcp-tasks-worker-api-tls"
    assert spec["issuerRef"] == {"name": "internal-ca", "kind": "ClusterIssuer"}
    assert spec["dnsNames"] == ["r-mcp-tasks-operator.demo.svc", "r-mcp-tasks-operator.demo.svc.cluster.local"]
    assert (spec["duration"], spec["renewBefore"]) == ("720h", "360h")
    assert "server auth" in spec["usages"]
    _, _, env = operator_parts(documents)
    assert env["MCPTASKS_WORKER_CA_SECRET"] == "r-mcp-tasks-worker-api-tls"
    assert env["MCPTASKS_WORKER_URL"].startswith("https://")
    named = rendered(control_plane, *BASE, *ISSUER, "--set", "tls.workerApi.secretName=worker-cert")
    certificates = {d["metadata"]["name"]: d for d in named if d["kind"] == "Certificate"}
    secret = certificates["r-mcp-tasks-worker-api"]["spec"]["secretName"]
    assert secret == "worker-cert", "cert-manager writes the Secret the operator mounts"


def test_a_warm_worker_certificate_reaches_the_operator_and_the_gateways_ca_only(control_plane: ControlPlane) -> None:
    """Warm pods get the certificate and key from the operator (`MCPTASKS_WARM_TLS_SECRET`, checked on the real
    control plane in `test_worker_tls.py`); the gateways and operators mount only its `ca.crt` to verify them."""
    documents = rendered(control_plane, *BASE, "--set", "tls.warmWorkers.secretName=warm-cert")
    _, _, env = operator_parts(documents)
    assert env["MCPTASKS_WARM_TLS_SECRET"] == "warm-cert"
    assert env["MCPTASKS_WORKER_URL"].startswith("http://"), "the worker API keeps its own setting"
    for component in ("-gateway", "-operator"):
        pod = deployment(documents, component)["spec"]["template"]["spec"]
        container = pod["containers"][0]
        variables = {item["name"]: item.get("value") for item in container["env"]}
        assert variables["MCPTASKS_WARM_TLS_CA_FILE"] == "/etc/mcptasks/warm-tls/ca.crt"
        (volume,) = [v for v in pod["volumes"] if v["name"] == "warm-tls-ca"]
        assert volume["secret"]["secretName"] == "warm-cert"
        assert volume["secret"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}], "the CA only, never the key"
    assert "MCPTASKS_WARM_TLS_SECRET" not in str(deployment(documents, "-gateway"))


def test_the_schema_refuses_a_malformed_tls_value(control_plane: ControlPlane) -> None:
    from tests.kube.test_helm import helm_template

    refused = helm_template(control_plane, *BASE, "--set", "tls.certManager.duration=90days")
    assert refused.returncode != 0 and "duration" in refused.stderr
    refused = helm_template(control_plane, *BASE, "--set", "tls.workerApi.secretname=typo")
    assert refused.returncode != 0 and "secretname" in refused.stderr
