"""Certificates made in a test (cryptography): self-signed or signed by a test CA."""

from __future__ import annotations

import ipaddress
from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID


def make_certificate(
    common_name: str,
    *,
    days: float = 365,
    sans: tuple[str, ...] = (),
    issuer_key=None,
    issuer_name: x509.Name | None = None,
    key_kind: str = "ec",
):
    """(certificate, private key) valid from an hour ago for ``days``."""
    key = (
        ec.generate_private_key(ec.SECP256R1())
        if key_kind == "ec"
        else rsa.generate_private_key(65537, 2048)
    )
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.now(UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name or subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(hours=1))
        .not_valid_after(now + timedelta(days=days))
    )
    names: list[x509.GeneralName] = []
    for san in sans:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(san)))
        except ValueError:
            names.append(x509.DNSName(san))
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    certificate = builder.sign(issuer_key or key, hashes.SHA256())
    return certificate, key


def pem_files(certificate, key, directory) -> tuple[str, str]:
    """Write the certificate and key as PEM files; their paths."""
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(cert_path), str(key_path)
