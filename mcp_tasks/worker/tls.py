"""TLS contexts for the executor's HTTP servers (worker API, warm workers) and their clients. stdlib `ssl` only.

Who calls it: the operator (serving the worker API over HTTPS when given a certificate) and whoever calls
a server that does. It never generates keys or certificates: those come from the deployment (the chart's
`tls.*` values: an existing `kubernetes.io/tls` Secret or a cert-manager Certificate; docs/security.md).
A served certificate is read again every `RELOAD_INTERVAL_S` (`ServedCertificate.refresh`): a renewed one
takes effect for new connections without a restart.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

logger = logging.getLogger("mcp_tasks.worker")

RELOAD_INTERVAL_S: Final = 60.0
"""How often a served certificate's files are read again for a renewal (cert-manager rotates the Secret and
the kubelet updates the mounted files), in seconds."""


def server_context(cert_file: Path, key_file: Path) -> ssl.SSLContext:
    """An HTTPS server context serving `cert_file` (PEM, leaf first, then any intermediates) with `key_file`.

    TLS 1.2 at least (the `ssl` module's secure defaults otherwise); no client certificate is asked for:
    callers authenticate with their bearer token or warm-call credential inside the connection.

    Raises:
        OSError: a file cannot be read.
        ssl.SSLError: the files are not a matching PEM certificate and key.
    """
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    return context


class ServedCertificate:
    """A server context (`server_context`) whose certificate and key are loaded again when their files change.

    Args:
        cert_file: PEM certificate chain, leaf first.
        key_file: its PEM private key.

    Raises:
        OSError, ssl.SSLError: as `server_context`, at construction.
    """

    def __init__(self, cert_file: Path, key_file: Path) -> None:
        self.cert_file, self.key_file = cert_file, key_file
        self.context = server_context(cert_file, key_file)
        self._digest = self._read_digest()

    def _read_digest(self) -> str:
        return hashlib.sha256(self.cert_file.read_bytes() + self.key_file.read_bytes()).hexdigest()

    async def refresh(self) -> bool:
        """Load the files again into the same context if they changed (new connections get the new
        certificate; open ones keep theirs); True when they did. A pair that does not load (a half-written
        renewal) is logged and the old one kept until the next refresh.
        """

        def reload() -> bool:
            digest = self._read_digest()
            if digest == self._digest:
                return False
            try:
                self.context.load_cert_chain(self.cert_file, self.key_file)
            except (OSError, ssl.SSLError) as exc:
                logger.warning("served certificate %s not reloaded (%s); keeping the previous one", self.cert_file, exc)
                return False
            self._digest = digest
            logger.info("served certificate %s reloaded", self.cert_file)
            return True

        return await asyncio.to_thread(reload)  # small file reads, off the loop


def client_context(ca_file: Path) -> ssl.SSLContext:
    """A client context that trusts only the CA in `ca_file` (PEM) and checks the server's host name.

    Raises:
        OSError: the file cannot be read.
        ssl.SSLError: it holds no PEM certificate.
    """
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca_file))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


@dataclass(frozen=True, slots=True)
class PeerTls:
    """How to call warm workers that serve HTTPS (Kubernetes, the chart's `tls.warmWorkers`): trust only the
    CA of `context` (`client_context`) and require `server_name` in the worker's certificate, whatever pod
    address the call goes to (warm pods are reached by IP; their certificate names the release's warm workers).
    """

    context: ssl.SSLContext
    server_name: str

    def request_options(self) -> dict[str, Any]:
        """The aiohttp request arguments that verify a worker (`ssl`, `server_hostname`)."""
        return {"ssl": self.context, "server_hostname": self.server_name}


def base_url(endpoint: str, peer: PeerTls | None) -> str:
    """`https://<host:port>` when warm workers serve TLS (`peer`), else `http://<host:port>`."""
    return f"{'http' if peer is None else 'https'}://{endpoint}"


def endpoint_of(url: str) -> str:
    """`host:port` of a worker's base URL (`base_url`'s inverse)."""
    return url.removeprefix("https://").removeprefix("http://")
