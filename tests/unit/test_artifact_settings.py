"""The `artifacts` settings group: environment variables, validation, and the store they choose.

Our choice (docs/configuration.md, docs/kubernetes.md §7): `MCPTASKS_S3_BUCKET` switches artifacts from
files under the data folder to an S3-compatible bucket; bad combinations fail at start-up naming the
variable; the secret key never appears in a repr.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_tasks.cli.artifacts import artifact_store
from mcp_tasks.cli.settings import Settings, SettingsError, from_environment, validate
from mcp_tasks.store.artifacts import FileArtifactStore
from mcp_tasks.store.s3 import S3ArtifactStore
from mcp_tasks.store.settings import ArtifactSettings

ENVIRONMENT = {
    "MCPTASKS_S3_BUCKET": "mcp-artifacts",
    "MCPTASKS_S3_PREFIX": "prod",
    "MCPTASKS_S3_ENDPOINT_URL": "http://seaweedfs.storage.svc:8333",
    "MCPTASKS_S3_REGION": "eu-west-1",
    "MCPTASKS_S3_ACCESS_KEY_ID": "AKIDEXAMPLE",
    "MCPTASKS_S3_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG",
    "MCPTASKS_S3_SSE": "true",
    "MCPTASKS_S3_PATH_STYLE": "yes",
    "MCPTASKS_S3_TIMEOUT_S": "7.5",
}


def test_every_s3_variable_sets_its_field() -> None:
    artifacts = from_environment(Settings(), ENVIRONMENT).artifacts
    assert artifacts == ArtifactSettings(
        s3_bucket="mcp-artifacts",
        s3_prefix="prod",
        s3_endpoint_url="http://seaweedfs.storage.svc:8333",
        s3_region="eu-west-1",
        s3_access_key_id="AKIDEXAMPLE",
        s3_secret_access_key="wJalrXUtnFEMI/K7MDENG",
        s3_sse=True,
        s3_path_style=True,
        s3_timeout_s=7.5,
    )
    assert artifacts.key_prefix == "prod/"
    assert "wJalrXUtnFEMI" not in repr(artifacts), "the secret key is never printed"


def test_empty_variables_mean_the_defaults() -> None:
    artifacts = from_environment(Settings(), {"MCPTASKS_S3_BUCKET": "", "MCPTASKS_S3_ENDPOINT_URL": ""}).artifacts
    assert artifacts.s3_bucket is None and artifacts.s3_endpoint_url is None
    assert ArtifactSettings(s3_prefix="/a/b/").key_prefix == "a/b/" and ArtifactSettings().key_prefix == ""


@pytest.mark.parametrize(
    ("environment", "named"),
    [
        ({"MCPTASKS_S3_ACCESS_KEY_ID": "AKIDEXAMPLE"}, "MCPTASKS_S3_SECRET_ACCESS_KEY"),
        ({"MCPTASKS_S3_SECRET_ACCESS_KEY": "x"}, "MCPTASKS_S3_ACCESS_KEY_ID"),
        ({"MCPTASKS_S3_ENDPOINT_URL": "seaweedfs:8333"}, "MCPTASKS_S3_ENDPOINT_URL"),
        ({"MCPTASKS_S3_TIMEOUT_S": "0"}, "MCPTASKS_S3_TIMEOUT_S"),
    ],
)
def test_a_bad_combination_fails_at_start_up_naming_the_variable(environment: dict[str, str], named: str) -> None:
    with pytest.raises(SettingsError, match=named):
        validate(from_environment(Settings(), {"MCPTASKS_S3_BUCKET": "b-u-c", **environment}), "gateway")


def test_the_bucket_chooses_the_store(tmp_path: Path) -> None:
    files = artifact_store(Settings(), tmp_path, 1024)
    assert isinstance(files, FileArtifactStore) and files.root == tmp_path / "artifacts"
    settings = from_environment(Settings(), ENVIRONMENT)
    bucket = artifact_store(settings, tmp_path, 1024)
    assert isinstance(bucket, S3ArtifactStore) and bucket.max_bytes == 1024
    assert bucket.where == "s3://mcp-artifacts/prod/ at http://seaweedfs.storage.svc:8333"
