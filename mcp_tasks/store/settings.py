"""`ArtifactSettings`: where large results are kept (group `artifacts` of the settings tree). Values only.

Read by `cli` to choose the artifact store: the file store under the data folder (the default), or the
S3-compatible object store (`store.s3`) when `s3_bucket` is set. It imports nothing beyond the standard
library, so the settings tree loads without the optional `s3` extra installed.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ArtifactSettings:
    """Where large results (artifacts) are kept (group `artifacts` of `Settings`).

    Attributes:
        s3_bucket: bucket of an S3-compatible object store for artifacts (needs the `s3` extra:
            `pip install 'mcp-tasks[s3]'`). Empty (the default): artifacts are files under the data
            folder, which on Kubernetes must be a ReadWriteMany volume every gateway and operator mounts.
        s3_prefix: key prefix of every artifact object, e.g. `mcp-tasks/` (a `/` is added when missing),
            so one bucket can serve several installations. Objects are `<prefix><taskId>/<name>`.
            Default empty: the bucket's root.
        s3_endpoint_url: URL of an S3-compatible server (MinIO, SeaweedFS, Ceph RGW, ...), e.g.
            `http://seaweedfs.storage.svc:8333`. Empty (the default): Amazon S3 of `s3_region`.
        s3_region: region of the bucket, used to sign requests (default `us-east-1`, which
            S3-compatible servers accept).
        s3_access_key_id: access key id. Empty (the default): the SDK's own chain (`AWS_*` variables,
            a web identity token such as EKS pod identity / IRSA, instance metadata). Give it with
            `s3_secret_access_key`, from a Secret.
        s3_secret_access_key: secret access key belonging to `s3_access_key_id`. Never logged.
        s3_sse: ask for server-side encryption of every object (`ServerSideEncryption: AES256`, keys
            managed by the store). Default off: buckets with default encryption need nothing.
        s3_path_style: address the bucket in the path (`http://host/bucket/key`) instead of the host
            name (`http://bucket.host/key`). On for most S3-compatible servers behind a Service name;
            off (the default) for Amazon S3.
        s3_timeout_s: deadline of one object-store operation, in seconds, including the SDK's one
            retry (default 30: a 64 MiB artifact at a few MB/s). Past it the operation fails with 503
            and the caller retries.
    """

    s3_bucket: str | None = None
    s3_prefix: str = ""
    s3_endpoint_url: str | None = None
    s3_region: str = "us-east-1"
    s3_access_key_id: str | None = None
    s3_secret_access_key: str | None = field(default=None, repr=False)
    s3_sse: bool = False
    s3_path_style: bool = False
    s3_timeout_s: float = 30.0

    @property
    def key_prefix(self) -> str:
        """`s3_prefix` ending in `/` (or empty): what every object key starts with."""
        prefix = self.s3_prefix.strip("/")
        return f"{prefix}/" if prefix else ""
