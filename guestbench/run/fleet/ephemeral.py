"""Throw-away mutual TLS for `guestbench fleet local`: a CA made for one fleet, whose key is never written (so
nothing else can ever be signed by it), and three certificates it signs, one per role, the role in the subject
(guestbench.run.fleet.roles): the scheduler's, the workers' and the coordinator's (the user's client). Without
them any local user could connect to the loopback scheduler or a worker and have root run their code; with
them, only who can read the fleet's private directory (root) can; and a worker's certificate makes its holder
no client of the scheduler.

The files go in a directory the caller made private (0700, its own); each is created 0600, exclusively, never
through a symbolic link. Dask reads them through its configuration, here as environment variables."""

from __future__ import annotations

import datetime
import ipaddress
import os
from pathlib import Path
from typing import Any
from collections.abc import Sequence

CA_FILE = "ca.pem"
DASK_ROLES = ("SCHEDULER", "WORKER", "CLIENT")  # the slots of Dask's TLS settings
VALID = datetime.timedelta(days=30)  # a fleet lives as long as its `fleet local`; the files go with it
ENV = "DASK_DISTRIBUTED__COMM__"
LOOPBACK = ipaddress.IPv4Address("127.0.0.1")  # where fleet local listens (Dask checks no host name anyway)


def _write(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _certificate(role: str, host: str, ca_name: Any, ca_key: Any, now: datetime.datetime) -> tuple[Any, Any]:
    """A certificate for `role` (and `host`), its common name saying so, signed by the CA; and its key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    from guestbench.run.fleet import roles

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, roles.common_name(role, host))])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(now + VALID)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(LOOPBACK)]),
                           critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    return cert, key


def make(directory: Path, hosts: Sequence[str] = ()) -> dict[str, dict[str, str]]:
    """Write the CA's certificate and each role's certificate and key into `directory`: the scheduler's, the
    coordinator's and, for each of `hosts`, a worker's naming that host (which the scheduler then admits
    under that name only; a worker certificate naming no host is admitted nowhere, so none is made). For each (keys
    "scheduler", "coordinator" or "worker.HOST"), Dask's TLS settings of the process that has it,
    encryption required, as environment variables: every slot of Dask's (scheduler, worker, client) holds
    that certificate, so a worker's own Dask client, say, shows the worker's, never the coordinator's."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(tz=datetime.UTC).replace(tzinfo=None) - datetime.timedelta(minutes=5)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"guestbench fleet local CA {os.getpid()}")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(now + VALID)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                       crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    _write(directory / CA_FILE, ca.public_bytes(pem))
    common = {f"{ENV}REQUIRE_ENCRYPTION": "True", f"{ENV}TLS__CA_FILE": str(directory / CA_FILE)}
    out: dict[str, dict[str, str]] = {}
    workers = [(f"worker.{h}", "worker", h, f"worker-{i}") for i, h in enumerate(hosts, 1)]
    for label, role, host, file in [("scheduler", "scheduler", "", "scheduler"),
                                    ("coordinator", "coordinator", "", "coordinator"),
                                    *workers]:
        cert, key = _certificate(role, host, ca_name, ca_key, now)
        _write(directory / f"{file}.pem", cert.public_bytes(pem))
        _write(directory / f"{file}-key.pem", key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                                serialization.NoEncryption()))
        env = dict(common)
        for slot in DASK_ROLES:
            env[f"{ENV}TLS__{slot}__CERT"] = str(directory / f"{file}.pem")
            env[f"{ENV}TLS__{slot}__KEY"] = str(directory / f"{file}-key.pem")
        out[label] = env
    return out


def client_settings(envs: dict[str, dict[str, str]]) -> dict[str, str]:
    """Of `make`'s settings, those the coordinator (`guestbench scenario --cluster`) needs: its client's."""
    return {k: v for k, v in envs["coordinator"].items() if "__SCHEDULER__" not in k and "__WORKER__" not in k}

