"""A throw-away certificate authority for TLS tests: a self-signed CA and a server certificate it signs.

Built with `cryptography` (EC P-256 keys, one day of validity); nothing here is for production.
"""

from __future__ import annotations

import base64
import ipaddress
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.controlplane.cluster import ControlPlane


@dataclass(frozen=True, slots=True)
class ServerPem:
    """PEM bytes: the server's certificate (`tls.crt`), its key (`tls.key`) and the CA's certificate (`ca.crt`)."""

    cert: bytes
    key: bytes
    ca: bytes

    def write(self, folder: Path) -> tuple[Path, Path, Path]:
        """Write `tls.crt`, `tls.key` and `ca.crt` into `folder`; their paths."""
        folder.mkdir(parents=True, exist_ok=True)
        paths = (folder / "tls.crt", folder / "tls.key", folder / "ca.crt")
        for path, data in zip(paths, (self.cert, self.key, self.ca), strict=True):
            path.write_bytes(data)
        return paths


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def issue(hosts: list[str], ca_name: str = "mcp-tasks test CA") -> ServerPem:
    """A new CA and a server certificate for `hosts` (DNS names or IP addresses, as subjectAltNames)."""
    now = datetime.now(UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name(ca_name))
        .issuer_name(_name(ca_name))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )  # keyCertSign, cRLSign
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(hosts[0]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return ServerPem(
        cert=cert.public_bytes(serialization.Encoding.PEM),
        key=key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
        ca=ca_cert.public_bytes(serialization.Encoding.PEM),
    )


def apply_tls_secret(plane: ControlPlane, namespace: str, name: str, pem: ServerPem) -> None:
    """A `kubernetes.io/tls` Secret with `tls.crt`, `tls.key` and `ca.crt`, as cert-manager writes one."""
    files = {"tls.crt": pem.cert, "tls.key": pem.key, "ca.crt": pem.ca}
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": name},
        "data": {key: base64.b64encode(data).decode() for key, data in files.items()},
    }
    plane.kubectl("apply", "-n", namespace, "-f", "-", input_text=json.dumps(secret))
