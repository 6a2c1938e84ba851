"""`S3ArtifactStore`: large results as objects in an S3-compatible bucket, beside `FileArtifactStore`.

Chosen by `cli` when `artifacts.s3_bucket` is set (the optional `s3` extra: aiobotocore); the gateway
reads artifacts for `resources/read` (after its owner check), the executors write them through the
worker channel, and both deployments' expiry sweeps delete them with their task (`delete_task`).

Layout: `<prefix><taskId>/<name>`, the MIME type as the object's `Content-Type`. Every operation has a
deadline (`s3_timeout_s`). Whatever goes wrong with the bucket (unreachable, missing, credentials
refused) is `StoreUnavailable` with a message naming the setting to check: the worker API answers the
tool 503 + `Retry-After` (its result is written again, never lost) and the gateway answers 503. It never
logs credentials or object contents.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Final

import aiohttp
from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from botocore.exceptions import BotoCoreError, ClientError

from mcp_tasks.store.artifacts import _SAFE, _is_artifact_name
from mcp_tasks.store.settings import ArtifactSettings
from mcp_tasks.tasks.errors import StoreUnavailable
from mcp_tasks.tasks.interfaces import Artifact
from mcp_tasks.tasks.results import artifact_uri

if TYPE_CHECKING:
    from types_aiobotocore_s3 import S3Client

logger = logging.getLogger("mcp_tasks.store")

_READ_CHUNK_BYTES: Final = 256 * 1024
"""Size of one read from an object's body while it is streamed into a `resources/read` answer."""

_PENDING_DELETES_MAX: Final = 10_000
"""Task ids whose objects could not be deleted, kept to be deleted again at the next `delete_task`; past
it the oldest are forgotten (a bucket lifecycle rule is the backstop, docs/kubernetes.md)."""

_START_CHECK_S: Final = 5.0
"""Deadline of the start-up check of the bucket, in seconds: a store that does not answer must not hold up
the start of a gateway or operator (it is only logged)."""

_RETRIES_PER_CALL: Final = 64
"""Earlier undeleted task ids retried by one `delete_task` call (bounds the extra work of one call)."""

_NOT_FOUND: Final = frozenset({"NoSuchKey", "404", "NotFound"})
_NO_BUCKET: Final = frozenset({"NoSuchBucket"})
_REFUSED: Final = frozenset(
    {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403", "InvalidToken", "ExpiredToken"}
)


class S3ArtifactStore:
    """An `ArtifactStore` on an S3-compatible object store.

    Open it (`open`) before use and close it (`aclose`) after; both are idempotent.

    Args:
        settings: bucket, prefix, endpoint, region, credentials, encryption, addressing, deadline.
        max_bytes: largest artifact accepted, in bytes (the same bound as the file store's).
    """

    def __init__(self, settings: ArtifactSettings, max_bytes: int) -> None:
        if not settings.s3_bucket:
            raise ValueError("S3ArtifactStore needs artifacts.s3_bucket (MCPTASKS_S3_BUCKET)")
        self.settings = settings
        self.bucket: str = settings.s3_bucket
        self.max_bytes = max_bytes
        self._prefix = settings.key_prefix
        self._stack = contextlib.AsyncExitStack()
        self._client: S3Client | None = None
        self._pending_deletes: dict[str, None] = {}  # insertion-ordered set of task ids

    @property
    def where(self) -> str:
        """`s3://bucket/prefix` at the endpoint, for messages (no credentials)."""
        endpoint = self.settings.s3_endpoint_url or f"Amazon S3 ({self.settings.s3_region})"
        return f"s3://{self.bucket}/{self._prefix} at {endpoint}"

    async def open(self) -> None:
        """Create the client and check that the bucket answers; trouble is logged, never fatal.

        A bucket that is missing or refuses the credentials is logged as an error (naming the settings
        to check); one that does not answer as a warning. The process starts anyway: the store may come
        up later, and until then each operation fails with `StoreUnavailable` (503, retried).
        """
        if self._client is not None:
            return
        settings = self.settings
        config = AioConfig(
            connect_timeout=min(settings.s3_timeout_s, 10.0),
            read_timeout=settings.s3_timeout_s,
            # one retry inside the SDK; past it the caller (the tool's runtime, the client) retries on 503
            retries={"max_attempts": 2, "mode": "standard"},
            s3={"addressing_style": "path" if settings.s3_path_style else "auto"},
            # Checksums only where the S3 API requires them: several S3-compatible servers refuse the
            # trailing checksums (aws-chunked uploads) the SDK would otherwise add to every PutObject.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            max_pool_connections=64,
            warm_up_loader_caches=True,  # the SDK reads its service model from disk: in a thread
        )
        session = get_session()
        self._client = await self._stack.enter_async_context(
            session.create_client(
                "s3",
                region_name=settings.s3_region,
                endpoint_url=settings.s3_endpoint_url,
                aws_access_key_id=settings.s3_access_key_id,
                aws_secret_access_key=settings.s3_secret_access_key,
                config=config,
            )
        )
        try:
            async with self._deadline("check the bucket", _START_CHECK_S, bucket_check=True):
                await self._client.head_bucket(Bucket=self.bucket)
        except StoreUnavailable as exc:
            refused = isinstance(exc.__cause__, ClientError)  # the store answered: missing bucket, credentials
            logger.log(logging.ERROR if refused else logging.WARNING, "artifact store not ready at start-up: %s", exc)
        else:
            logger.info("artifacts in %s", self.where)

    async def aclose(self) -> None:
        """Close the client and its connections."""
        self._client = None
        await self._stack.aclose()

    def _key(self, task_id: str, name: str) -> str:
        return f"{self._prefix}{task_id}/{name}"

    def _ready(self) -> S3Client:
        if self._client is None:
            raise StoreUnavailable(f"the artifact store {self.where} is not open")
        return self._client

    @contextlib.asynccontextmanager
    async def _deadline(
        self, action: str, timeout_s: float | None = None, bucket_check: bool = False
    ) -> AsyncIterator[None]:
        """Bound one operation by `s3_timeout_s` (or the shorter `timeout_s`) and turn the SDK's failures
        into `StoreUnavailable`.
        """
        limit_s = self.settings.s3_timeout_s if timeout_s is None else min(timeout_s, self.settings.s3_timeout_s)
        try:
            async with asyncio.timeout(limit_s):
                yield
        except ClientError as exc:
            code = _error_code(exc)
            if code in _NOT_FOUND and bucket_check:
                code = "NoSuchBucket"  # HeadBucket answers a bare 404
            elif code not in _NOT_FOUND | _NO_BUCKET | _REFUSED and await self._bucket_missing():
                code = "NoSuchBucket"  # some S3-compatible servers answer InternalError for a missing bucket
            raise self._refused(code, action) from exc
        except (BotoCoreError, aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise StoreUnavailable(
                f"the artifact store {self.where} is unreachable ({type(exc).__name__}) while trying to "
                f"{action}; check MCPTASKS_S3_ENDPOINT_URL and that the store is up"
            ) from exc

    async def _bucket_missing(self) -> bool:
        """Whether HeadBucket says the bucket does not exist (to explain an unspecific refusal)."""
        client = self._client
        if client is None:
            return False
        try:
            async with asyncio.timeout(min(_START_CHECK_S, self.settings.s3_timeout_s)):
                await client.head_bucket(Bucket=self.bucket)
        except ClientError as exc:
            return _error_code(exc) in _NOT_FOUND | _NO_BUCKET
        except (BotoCoreError, aiohttp.ClientError, TimeoutError, OSError):
            return False
        return False

    def _refused(self, code: str, action: str) -> StoreUnavailable:
        if code in _NO_BUCKET:
            return StoreUnavailable(
                f"the artifact bucket {self.bucket!r} does not exist (MCPTASKS_S3_BUCKET) while trying to "
                f"{action}; create it or fix the setting"
            )
        if code in _REFUSED:
            return StoreUnavailable(
                f"the artifact store {self.where} refused access ({code}) while trying to {action}; check "
                "MCPTASKS_S3_ACCESS_KEY_ID / MCPTASKS_S3_SECRET_ACCESS_KEY (or the pod's cloud identity) "
                "and the bucket's policy"
            )
        return StoreUnavailable(f"the artifact store {self.where} answered {code} while trying to {action}")

    async def put(self, task_id: str, name: str, data: bytes, mime_type: str) -> str:
        """Store the artifact as one object and return its URI (the object exists once this returns).

        Raises:
            ValueError: `name` or `task_id` is not a safe name, or `data` exceeds `max_bytes`.
            StoreUnavailable: the bucket could not take it (the worker API answers 503; the tool retries).
        """
        if not _is_artifact_name(name) or not _SAFE.match(task_id):
            raise ValueError(f"invalid artifact name {name!r}")
        if len(data) > self.max_bytes:
            raise ValueError(f"artifact of {len(data)} bytes exceeds the limit of {self.max_bytes}")
        client = self._ready()
        async with self._deadline("store an artifact"):
            if self.settings.s3_sse:
                await client.put_object(
                    Bucket=self.bucket,
                    Key=self._key(task_id, name),
                    Body=data,
                    ContentType=mime_type,
                    ServerSideEncryption="AES256",
                )
            else:
                await client.put_object(
                    Bucket=self.bucket, Key=self._key(task_id, name), Body=data, ContentType=mime_type
                )
        return artifact_uri(task_id, name)

    async def get(self, task_id: str, name: str) -> Artifact | None:
        """Read an artifact in chunks (bounded by `max_bytes`), or `None` when it does not exist.

        Raises:
            StoreUnavailable: the bucket did not answer, or the object is larger than `max_bytes`.
        """
        if not _is_artifact_name(name) or not _SAFE.match(task_id):
            return None
        client = self._ready()
        chunks: list[bytes] = []
        size = 0
        try:
            async with self._deadline("read an artifact"):
                response = await client.get_object(Bucket=self.bucket, Key=self._key(task_id, name))
                async with response["Body"] as body:
                    while chunk := await body.read(_READ_CHUNK_BYTES):
                        size += len(chunk)
                        if size > self.max_bytes:
                            raise StoreUnavailable(
                                f"the artifact object {self._key(task_id, name)!r} is larger than the "
                                f"{self.max_bytes}-byte limit (MCPTASKS_ARTIFACT_MAX_BYTES)"
                            )
                        chunks.append(chunk)
                mime_type = response.get("ContentType") or "application/octet-stream"
        except StoreUnavailable as exc:
            if isinstance(exc.__cause__, ClientError) and _error_code(exc.__cause__) in _NOT_FOUND:
                return None
            raise
        return Artifact(data=b"".join(chunks), mime_type=mime_type)

    async def delete_task(self, task_id: str) -> None:
        """Delete every object of a task (no error when there are none).

        Never raises for the store's trouble: the task itself is already gone, so its id is kept and its
        objects are deleted at a later call (up to `_RETRIES_PER_CALL` earlier ids ride along each call).
        """
        if not _SAFE.match(task_id):
            return
        self._pending_deletes.pop(task_id, None)
        batch = [task_id, *itertools.islice(self._pending_deletes, _RETRIES_PER_CALL)]
        for index, pending in enumerate(batch):
            try:
                await self._delete_objects(pending)
            except StoreUnavailable as exc:
                logger.warning("artifacts of a deleted task kept for later: %s", exc, extra={"taskId": pending})
                for later in batch[index:]:
                    self._pending_deletes[later] = None
                while len(self._pending_deletes) > _PENDING_DELETES_MAX:
                    del self._pending_deletes[next(iter(self._pending_deletes))]
                return
            self._pending_deletes.pop(pending, None)

    async def _delete_objects(self, task_id: str) -> None:
        client = self._ready()
        async with self._deadline("delete a task's artifacts"):
            listing = await client.list_objects_v2(Bucket=self.bucket, Prefix=f"{self._prefix}{task_id}/")
            for item in listing.get("Contents", []):
                if "Key" in item:
                    await client.delete_object(Bucket=self.bucket, Key=item["Key"])


def _error_code(exc: ClientError) -> str:
    """The S3 error code of a refused request (`NoSuchKey`, `AccessDenied`, ...; an HTTP status when bodiless)."""
    error = exc.response.get("Error", {})
    code = error.get("Code") or ""
    if not code:
        code = str(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
    return code
