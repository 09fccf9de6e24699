"""Throw-away mutual TLS for `guestbench fleet local`: a CA made for one fleet, whose key is never written (so
nothing else can ever be signed by it), and one certificate it signs for the scheduler, the workers and the
user's client. Without them any local user could connect to the loopback scheduler or a worker and have root
run their code; with them, only who can read the fleet's private directory (root) can.

The files go in a directory the caller made private (0700, its own); each is created 0600, exclusively, never
through a symbolic link. Dask reads them through its configuration, here as environment variables."""

from __future__ import annotations

import datetime
import ipaddress
import os
from pathlib import Path

CA_FILE, CERT_FILE, KEY_FILE = "ca.pem", "fleet.pem", "fleet-key.pem"
VALID = datetime.timedelta(days=30)  # a fleet lives as long as its `fleet local`; the files go with it
ENV = "DASK_DISTRIBUTED__COMM__"
LOOPBACK = ipaddress.IPv4Address("127.0.0.1")  # where fleet local listens (Dask checks no host name anyway)


def _write(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def make(directory: Path) -> dict[str, str]:
    """Write the CA's certificate and the fleet's certificate and key into `directory`; Dask's TLS settings for
    every role (scheduler, worker, client), encryption required, as environment variables."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(tz=datetime.timezone.utc).replace(tzinfo=None) - datetime.timedelta(minutes=5)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"guestbench fleet local CA {os.getpid()}")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(now + VALID)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                       crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "guestbench fleet local")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(now + VALID)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(LOOPBACK)]),
                           critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    _write(directory / CA_FILE, ca.public_bytes(pem))
    _write(directory / CERT_FILE, cert.public_bytes(pem))
    _write(directory / KEY_FILE, key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                   serialization.NoEncryption()))
    env = {f"{ENV}REQUIRE_ENCRYPTION": "True", f"{ENV}TLS__CA_FILE": str(directory / CA_FILE)}
    for role in ("SCHEDULER", "WORKER", "CLIENT"):
        env[f"{ENV}TLS__{role}__CERT"] = str(directory / CERT_FILE)
        env[f"{ENV}TLS__{role}__KEY"] = str(directory / KEY_FILE)
    return env


def client_settings(env: dict[str, str]) -> dict[str, str]:
    """Of `make`'s settings, those a client (`guestbench scenario --cluster`) needs."""
    return {k: v for k, v in env.items() if "__SCHEDULER__" not in k and "__WORKER__" not in k}

