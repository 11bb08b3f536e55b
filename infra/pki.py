"""Certificates and credentials for the secured stack: a throwaway CA, a server certificate,
SCRAM users with random passwords, and files that only their owner can read.

Apart from `security` (the Kafka node and the stack) because the registry's proxy
(`registry_proxy`) needs the same certificate and users, and neither should import the
other's internals. `cryptography` (the `stack` extra) is imported only by `make_pki`.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

USERS = ("admin", "producer", "consumer", "registry")


# -- certificates -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Pki:
    """PEM files of a test CA and one server certificate for 127.0.0.1/localhost."""

    ca_cert: Path
    server_cert: Path  # server certificate chain (server, then CA)
    server_key: Path  # unencrypted PKCS#8, mode 0600
    server_keystore: Path  # key + chain in one file, for Kafka's PEM keystore


def make_pki(directory: Path, host: str = "127.0.0.1") -> Pki:
    """A fresh CA and server certificate; valid for a day, which outlives any test run."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "rlmesh-stream test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - dt.timedelta(minutes=5))
          .not_valid_after(now + dt.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False,
                                       False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([
                x509.IPAddress(ipaddress.ip_address(host)), x509.DNSName("localhost")]),
                critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    ca_pem = ca.public_bytes(pem)
    chain = cert.public_bytes(pem) + ca_pem
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    pki = Pki(directory / "ca.pem", directory / "server.pem", directory / "server.key",
              directory / "server-keystore.pem")
    pki.ca_cert.write_bytes(ca_pem)
    pki.server_cert.write_bytes(chain)
    write_private(pki.server_key, key_pem)
    write_private(pki.server_keystore, key_pem + chain)
    return pki


def write_private(path: Path, data: bytes | str) -> None:
    """Create `path` readable by its owner only, before any secret is in it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data.encode() if isinstance(data, str) else data)


# -- users ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Credentials:
    """One user's name and password; the password never shows in repr or str."""

    username: str
    password: str = field(repr=False)

    @classmethod
    def generate(cls, username: str) -> Credentials:
        return cls(username, secrets.token_urlsafe(24))

    def __str__(self) -> str:
        return f"User:{self.username}"


def generate_users(names: Iterable[str] = USERS) -> dict[str, Credentials]:
    return {n: Credentials.generate(n) for n in names}
