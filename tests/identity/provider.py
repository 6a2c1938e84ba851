"""A real OAuth 2.1 / OpenID Connect server for the identity tests: ory hydra v2.3.0 (`MCPTASKS_HYDRA`, `PATH`,
else built from Go modules by `tests/identity/build.sh` into `~/.cache/mcp-tasks/hydra`), run with an in-memory
database on loopback.

`Hydra` starts and stops the process, registers clients through its admin API, issues JWT access tokens
(client credentials), and plays the user of an authorization-code flow (its login and consent admin API).
hydra does not implement RFC 8707's `resource` parameter; it takes the resource as `audience`, which is
what the tests send it besides `resource`.

Nothing here fails at import: `hydra_binary()` raises `ProviderUnavailable` saying how to build it.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import subprocess
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2

from tests import binaries
from tests.controlplane.cluster import free_port, wait_until

START_TIMEOUT_S = 60.0
"""hydra generates two RSA key pairs when it starts on an empty database: seconds on a busy machine."""


class ProviderUnavailable(Exception):
    """No hydra here, or one of another version; the message says which is needed and how to build it."""


def hydra_binary() -> Path:
    """The hydra binary: `MCPTASKS_HYDRA`, `PATH`, else what `tests/identity/build.sh` built (`tests/binaries.py`).

    Raises:
        ProviderUnavailable: none, or of another version (the message says which is needed and how to build it).
    """
    try:
        return binaries.find("hydra")
    except binaries.BinaryUnavailable as exc:
        raise ProviderUnavailable(f"the identity provider cannot start: {exc}") from exc


class Hydra:
    """One hydra process (`serve all --dev`, in-memory database) on two loopback ports.

    A restart keeps the ports, so the issuer URL stays, but the database is new: new signing keys, no
    clients. Use as a context manager.
    """

    def __init__(self, binary: Path, log_path: Path) -> None:
        self.binary = binary
        self.log_path = log_path
        self.public_port = free_port()
        self.admin_port = free_port()
        self.issuer = f"http://127.0.0.1:{self.public_port}"
        self.admin = f"http://127.0.0.1:{self.admin_port}"
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Hydra:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start hydra and return once it serves its discovery document and signing keys."""
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", "/tmp"),
            "DSN": "memory",
            "SERVE_PUBLIC_HOST": "127.0.0.1",
            "SERVE_PUBLIC_PORT": str(self.public_port),
            "SERVE_ADMIN_HOST": "127.0.0.1",
            "SERVE_ADMIN_PORT": str(self.admin_port),
            "URLS_SELF_ISSUER": self.issuer,
            # never served: the tests play the user through the login and consent admin API
            "URLS_LOGIN": "http://127.0.0.1:9/login",
            "URLS_CONSENT": "http://127.0.0.1:9/consent",
            "SECRETS_SYSTEM": secrets.token_hex(16),
            "STRATEGIES_ACCESS_TOKEN": "jwt",
            "LOG_LEVEL": "warn",
            "SQA_OPT_OUT": "true",
        }
        log = self.log_path.open("ab")
        self._process = subprocess.Popen(
            [str(self.binary), "serve", "all", "--dev", "--sqa-opt-out"], env=env, stdout=log, stderr=log
        )
        log.close()
        process = self._process

        def ready() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"hydra exited with {process.returncode}; see {self.log_path}")
            return self._serving()

        try:
            wait_until(
                ready,
                START_TIMEOUT_S,
                lambda: f"hydra did not serve its keys within {START_TIMEOUT_S:g} s; see {self.log_path}",
            )
        except RuntimeError:
            self.stop()
            raise

    def _serving(self) -> bool:
        """Ready, with signing keys. Keys are made on the first JWKS read: one read at a time, since each
        read before they exist makes another RSA key pair (seconds of CPU each)."""
        try:
            with urllib.request.urlopen(f"{self.admin}/health/ready", timeout=2) as response:
                response.read()
            with urllib.request.urlopen(f"{self.issuer}/.well-known/jwks.json", timeout=START_TIMEOUT_S) as response:
                keys = json.loads(response.read()).get("keys", [])
        except (OSError, ValueError):
            return False
        return any(key.get("use") == "sig" for key in keys)

    def stop(self) -> None:
        """Stop hydra (SIGTERM, then SIGKILL after 10 s)."""
        if self._process is None:
            return
        self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(timeout=10)
        self._process = None

    def restart(self) -> None:
        """Stop and start again on the same ports: same issuer, new keys, no clients."""
        self.stop()
        self.start()

    async def create_client(
        self,
        client_id: str,
        *,
        audiences: list[str],
        scope: str = "",
        grant_types: tuple[str, ...] = ("client_credentials",),
        redirect_uris: tuple[str, ...] = (),
        public: bool = False,
        access_token_lifespan: str | None = None,
    ) -> str:
        """Register a client through the admin API; returns its secret (empty for a public client)."""
        secret = "" if public else secrets.token_urlsafe(24)
        body: dict[str, Any] = {
            "client_id": client_id,
            "grant_types": list(grant_types),
            "response_types": ["code"] if "authorization_code" in grant_types else [],
            "audience": audiences,
            "scope": scope,
            "redirect_uris": list(redirect_uris),
            "token_endpoint_auth_method": "none" if public else "client_secret_basic",
        }
        if secret:
            body["client_secret"] = secret
        async with httpx2.AsyncClient(timeout=10) as http:
            response = await http.post(f"{self.admin}/admin/clients", json=body)
            assert response.status_code == 201, response.text
            if access_token_lifespan is not None:
                lifespans = {"client_credentials_grant_access_token_lifespan": access_token_lifespan}
                response = await http.put(f"{self.admin}/admin/clients/{client_id}/lifespans", json=lifespans)
                assert response.status_code == 200, response.text
        return secret

    async def client_credentials(self, client_id: str, secret: str, audience: str, scope: str = "") -> str:
        """An access token (a JWT) for `client_id` with `aud` = `audience`."""
        data = {"grant_type": "client_credentials", "audience": audience}
        if scope:
            data["scope"] = scope
        async with httpx2.AsyncClient(timeout=10) as http:
            response = await http.post(f"{self.issuer}/oauth2/token", data=data, auth=(client_id, secret))
        assert response.status_code == 200, response.text
        return str(response.json()["access_token"])

    async def play_user(self, authorization_url: str, subject: str, audience: str) -> tuple[str, str | None]:
        """Follow an authorization request as a user agent that logs in as `subject` and consents to all.

        hydra redirects to its login and consent apps with a challenge; the test accepts each through
        the admin API and follows the redirect it returns, until hydra redirects to the client with a code.

        Returns:
            `(code, state)` from the client's redirect URI.
        """
        parts = urlsplit(authorization_url)
        if "audience" not in parse_qs(parts.query):  # hydra takes the RFC 8707 resource as `audience`
            authorization_url += f"&audience={httpx2.URL(audience)}"
        async with httpx2.AsyncClient(timeout=10, follow_redirects=False) as browser:
            url = authorization_url
            for _ in range(10):
                response = await browser.get(url)
                assert response.status_code in (302, 303), response.text
                url = response.headers["location"]
                query = parse_qs(urlsplit(url).query)
                if "login_challenge" in query:
                    url = await self._accept(
                        "login", query["login_challenge"][0], {"subject": subject, "remember": False}
                    )
                elif "consent_challenge" in query:
                    challenge = query["consent_challenge"][0]
                    async with httpx2.AsyncClient(timeout=10) as admin:
                        asked = await admin.get(
                            f"{self.admin}/admin/oauth2/auth/requests/consent", params={"consent_challenge": challenge}
                        )
                    grant = {
                        "grant_scope": asked.json().get("requested_scope") or [],
                        "grant_access_token_audience": asked.json().get("requested_access_token_audience") or [],
                    }
                    url = await self._accept("consent", challenge, grant)
                elif "code" in query:
                    state = query.get("state")
                    return query["code"][0], state[0] if state else None
                elif "error" in query:
                    raise AssertionError(f"hydra refused the authorization request: {query}")
        raise AssertionError("hydra's authorization flow did not end in a code within 10 redirects")

    async def _accept(self, kind: str, challenge: str, body: dict[str, Any]) -> str:
        async with httpx2.AsyncClient(timeout=10) as admin:
            response = await admin.put(
                f"{self.admin}/admin/oauth2/auth/requests/{kind}/accept",
                params={f"{kind}_challenge": challenge},
                json=body,
            )
        assert response.status_code == 200, response.text
        return str(response.json()["redirect_to"])


def claims_of(token: str) -> dict[str, Any]:
    """A JWT's payload, unverified (for assertions about what the issuer put in it)."""
    payload = token.split(".")[1]
    return dict(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))))
