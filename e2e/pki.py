"""Certificates and keys for the local control plane (a throwaway CA per cluster)."""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from e2e.podnet import HOST_ADDRESS

VALIDITY = dt.timedelta(days=365)


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _write_key(key: rsa.RSAPrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key: rsa.RSAPublicKey
) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
    )


def create(directory: Path, client_users: dict[str, str]) -> None:
    """Write ca.{crt,key}, apiserver.{crt,key}, sa.{key,pub}, front-proxy-ca.{crt,key},
    front-proxy-client.{crt,key} and NAME.{crt,key} per client.

    `client_users` maps a file name to "CN" or "CN/O" (O is the group).
    """
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = _ca(directory, "ca", "specfleet-local-ca")
    hosts = (
        "localhost",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "127.0.0.1",
        "10.0.0.1",
        str(HOST_ADDRESS),  # where the API server listens (e2e/podnet.py)
    )
    server = [ExtendedKeyUsageOID.SERVER_AUTH]
    _leaf(directory, "apiserver", _name("kube-apiserver"), ca_key, ca_cert, server, hosts)
    for file_name, user in client_users.items():
        common_name, _, group = user.partition("/")
        subject = _name(common_name, group or None)
        _leaf(directory, file_name, subject, ca_key, ca_cert, [ExtendedKeyUsageOID.CLIENT_AUTH])

    # The aggregation layer: the API server proxies to extension API servers (KEDA's
    # metrics server) as front-proxy-client, and they trust the user it names by this CA.
    proxy_key, proxy_cert = _ca(directory, "front-proxy-ca", "front-proxy-ca")
    client = [ExtendedKeyUsageOID.CLIENT_AUTH]
    _leaf(
        directory, "front-proxy-client", _name("front-proxy-client"), proxy_key, proxy_cert, client
    )

    sa_key = _key()
    _write_key(sa_key, directory / "sa.key")
    (directory / "sa.pub").write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def mutual_tls(directory: Path, name: str, hosts: tuple[str, ...]) -> None:
    """ca.crt, tls.crt and tls.key in `directory`: one certificate, for server and client
    alike, as KEDA's operator and metrics server each read their --cert-dir."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = _ca(directory, "ca", f"{name}-ca")
    (directory / "ca.key").unlink()
    usages = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    _leaf(directory, "tls", _name(name), ca_key, ca_cert, usages, hosts)


def _ca(
    directory: Path, file_name: str, common_name: str
) -> tuple[rsa.RSAPrivateKey, x509.Certificate]:
    """A CA certificate and key, written as FILE.crt and FILE.key."""
    key = _key()
    subject = _name(common_name)
    cert = (
        _builder(subject, subject, key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
        )
        .sign(key, hashes.SHA256())
    )
    _write_key(key, directory / f"{file_name}.key")
    (directory / f"{file_name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key, cert


def _leaf(
    directory: Path,
    file_name: str,
    subject: x509.Name,
    ca_key: rsa.RSAPrivateKey,
    ca_cert: x509.Certificate,
    usages: list[x509.ObjectIdentifier],
    hosts: tuple[str, ...] = (),
) -> None:
    """A certificate signed by the CA, for names and addresses `hosts`, written as
    FILE.crt and FILE.key."""
    key = _key()
    builder = _builder(subject, ca_cert.subject, key.public_key()).add_extension(
        x509.ExtendedKeyUsage(usages), critical=False
    )
    if hosts:
        alternative: list[x509.GeneralName] = []
        for host in hosts:
            try:
                alternative.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                alternative.append(x509.DNSName(host))
        builder = builder.add_extension(x509.SubjectAlternativeName(alternative), critical=False)
    _write_key(key, directory / f"{file_name}.key")
    cert = builder.sign(ca_key, hashes.SHA256())
    (directory / f"{file_name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
