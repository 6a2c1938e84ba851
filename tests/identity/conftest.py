"""Fixtures of the identity tests: a real identity provider (ory hydra) and servers that trust it.

The tests here skip with the reason when hydra is not built, unless `MCPTASKS_REQUIRE_CONTROL_PLANE=1`
(set by `.ci/run`), which turns the skip into a failure: CI cannot pass without running them.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from mcp_tasks.cli.settings import Settings, validate
from tests.conftest import Embedded, server_settings, serving
from tests.identity.provider import Hydra, ProviderUnavailable, hydra_binary


@pytest.fixture(scope="session")
def hydra_path() -> Path:
    try:
        return hydra_binary()
    except ProviderUnavailable as exc:
        if os.environ.get("MCPTASKS_REQUIRE_CONTROL_PLANE") == "1":
            pytest.fail(str(exc))
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def hydra(hydra_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hydra]:
    """One identity provider for the session (tests that restart one start their own)."""
    with Hydra(hydra_path, tmp_path_factory.mktemp("hydra") / "hydra.log") as provider:
        yield provider


def trusting(settings: Settings, *issuers: str, **auth: object) -> Settings:
    """`settings` that accept OIDC tokens of `issuers` (keys refetched on any unknown `kid` at once)."""
    fields: dict[str, object] = {"oidc_issuer": issuers, "oidc_jwks_refresh_min_s": 0.0, **auth}
    return validate(replace(settings, auth=replace(settings.auth, **fields)))  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def oidc_server(tmp_path: Path, *issuers: str, **auth: object) -> AsyncIterator[Embedded]:
    """An embedded server that trusts `issuers`, with its audience derived from the loopback `Host`."""
    async with serving(trusting(server_settings(tmp_path), *issuers, **auth)) as server:
        yield server


@pytest.fixture
async def trusting_hydra(tmp_path: Path, hydra: Hydra) -> AsyncIterator[Embedded]:
    async with oidc_server(tmp_path, hydra.issuer) as server:
        yield server
