"""Identity on Kubernetes: ServiceAccount tokens (TokenReview) and OIDC tokens (ory hydra) at the Kubernetes
gateway, on the real API server of the test control plane.

Issue 22 §3 and §8: an in-cluster agent's projected token with the gateway's audience is accepted, its
namespace the tenant and its ServiceAccount the subject; a token for another audience is refused.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web

from mcp_tasks import gateway
from mcp_tasks.cli.gateway import build_gateway_app
from mcp_tasks.cli.serve import LINGERING_TIME_S
from mcp_tasks.cli.settings import validate
from mcp_tasks.tasks.owner import Owner
from tests.conftest import McpHttp
from tests.controlplane.cluster import ControlPlane
from tests.identity.conftest import hydra, hydra_path  # noqa: F401  (fixtures shared with tests/identity)
from tests.identity.provider import Hydra
from tests.kube.conftest import Gateway, gateway_settings
from tests.kube.test_helm import helm_template
from tests.kube.test_rbac import CHART, account_kubeconfig, can

AUDIENCE = "https://mcp.example.test/mcp"


@contextlib.asynccontextmanager
async def gateway_with(plane: ControlPlane, namespace: str, data_dir: Path, **auth: Any) -> AsyncIterator[Gateway]:
    """A Kubernetes gateway on 127.0.0.1 with the `auth` settings given."""
    settings = gateway_settings(plane, namespace, data_dir)
    settings = validate(replace(settings, auth=replace(settings.auth, **auth)), "gateway")
    app = await build_gateway_app(settings)
    web_runner = gateway.create_runner(app, shutdown_timeout_s=2, lingering_time_s=LINGERING_TIME_S)
    await web_runner.setup()
    try:
        await web.TCPSite(web_runner, "127.0.0.1", 0).start()
        yield Gateway(f"http://127.0.0.1:{web_runner.addresses[0][1]}/mcp", app)
    finally:
        await web_runner.cleanup()


async def test_a_service_account_token_for_the_gateway_audience_is_accepted_and_another_audience_refused(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """TokenRequest tokens (what a projected volume holds): the principal is (namespace, ServiceAccount)."""
    control_plane.kubectl("create", "serviceaccount", "agent", "-n", namespace)

    def token(audience: str) -> str:
        return control_plane.kubectl(
            "create", "token", "agent", "-n", namespace, "--audience", audience, "--duration", "10m"
        ).strip()

    async with (
        gateway_with(
            control_plane, namespace, tmp_path, service_account_tokens=True, service_account_audience=AUDIENCE
        ) as server,
        aiohttp.ClientSession() as http,
    ):
        agent = McpHttp(http, server.url, token=token(AUDIENCE))
        task_id = await agent.start_task("slow_compute", {"seconds": 0, "label": "x"})
        record = await server.store.get(task_id, Owner(namespace, "agent", "kubernetes"))
        assert record.task_id == task_id
        for refused in (token("https://elsewhere.example/mcp"), "x" * 40 + "." + "y" * 40 + ".z"):
            reply = await McpHttp(http, server.url, token=refused).request("tools/list")
            assert reply.status == 401, reply.body
            assert 'error="invalid_token"' in reply.headers["WWW-Authenticate"]
        assert (await McpHttp(http, server.url).request("tools/list")).status == 401


async def test_the_kubernetes_gateway_accepts_oidc_tokens_of_a_real_issuer(
    control_plane: ControlPlane,
    namespace: str,
    tmp_path: Path,
    hydra: Hydra,  # noqa: F811
) -> None:
    """The same identity code path in the Kubernetes deployment: a hydra token for the configured resource."""
    async with (
        gateway_with(control_plane, namespace, tmp_path, oidc_issuer=(hydra.issuer,), resource_uri=AUDIENCE) as server,
        aiohttp.ClientSession() as http,
    ):
        client_id = f"svc-{secrets.token_hex(4)}"
        secret = await hydra.create_client(client_id, audiences=[AUDIENCE, "https://elsewhere.example/mcp"])
        good = await hydra.client_credentials(client_id, secret, AUDIENCE)
        task_id = await McpHttp(http, server.url, token=good).start_task("slow_compute", {"seconds": 0, "label": "x"})
        assert (await server.store.get(task_id, Owner(hydra.issuer, client_id, hydra.issuer))).task_id == task_id
        other = await hydra.client_credentials(client_id, secret, "https://elsewhere.example/mcp")
        reply = await McpHttp(http, server.url, token=other).request("tools/list")
        assert reply.status == 401
        assert reply.headers["WWW-Authenticate"].startswith(
            'Bearer resource_metadata="https://mcp.example.test/.well-known/oauth-protected-resource/mcp"'
        )


def test_the_chart_renders_the_identity_settings_and_refuses_an_oidc_block_without_an_issuer(
    control_plane: ControlPlane,
) -> None:
    """Issue 22 §7: `auth.oidc.*`, `auth.serviceAccountTokens.*`; the token Secret is optional then."""
    oidc = ["--set", "auth.oidc.enabled=true", "--set", f"auth.resourceUri={AUDIENCE}"]
    refused = helm_template(control_plane, *oidc)
    assert refused.returncode != 0 and "/auth/oidc/issuers" in refused.stderr, refused.stderr
    plain = helm_template(control_plane, "--set", "auth.oidc.issuers={http://idp.example}", *oidc)
    assert plain.returncode != 0 and "/auth/oidc/issuers/0" in plain.stderr, "only https:// issuers"
    rendered = helm_template(
        control_plane,
        *oidc,
        "--set",
        "auth.oidc.issuers={https://idp.example,https://login.example/tenant/v2.0}",
        "--set",
        "auth.serviceAccountTokens.enabled=true",
        "--show-only",
        "templates/gateway.yaml",
    )
    assert rendered.returncode == 0, rendered.stderr
    env = {item["name"]: item.get("value") for item in _gateway_container(rendered.stdout)["env"]}
    assert env["MCPTASKS_OIDC_ISSUER"] == "https://idp.example,https://login.example/tenant/v2.0"
    assert env["MCPTASKS_RESOURCE_URI"] == AUDIENCE
    assert env["MCPTASKS_SERVICE_ACCOUNT_TOKENS"] == "true"
    assert "MCPTASKS_TOKENS" not in env
    assert "tokens" not in rendered.stdout.split("volumes:")[-1]


def _gateway_container(manifests: str) -> dict[str, Any]:
    deployment = next(doc for doc in yaml.safe_load_all(manifests) if doc and doc["kind"] == "Deployment")
    return dict(deployment["spec"]["template"]["spec"]["containers"][0])


def test_the_gateway_may_review_tokens_only_when_service_account_tokens_are_on(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """Least privilege (CONVENTIONS.md §Kubernetes): `create tokenreviews` comes with the feature, not before."""
    for enabled in (False, True):
        release = f"i{int(enabled)}"
        rbac = control_plane.helm(
            "template",
            release,
            str(CHART),
            "--namespace",
            namespace,
            "--show-only",
            "templates/rbac.yaml",
            "--set",
            "auth.existingSecret=tokens",
            "--set",
            f"auth.serviceAccountTokens.enabled={str(enabled).lower()}",
        )
        control_plane.kubectl("apply", "-f", "-", input_text=rbac)
        config = account_kubeconfig(control_plane, namespace, f"{release}-mcp-tasks-gateway", tmp_path)
        assert can(control_plane, config, "create", "tokenreviews.authentication.k8s.io") is enabled
        assert not can(control_plane, config, "get", "secrets")
