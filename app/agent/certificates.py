"""TLS certificate facts from the PEM nmap's ``ssl-cert`` script prints and the base64 DER
of masscan's ``X509`` banner (issue 37).

``certificate_facts(pem)`` (and ``certificate_facts_base64_der``) reads one certificate
with ``cryptography`` into the upload's ``tls`` document: subject CN, subject alternative
names (DNS names and addresses), issuer (RFC 4514 text), not-before/not-after (UTC,
``…Z``), SHA-256 fingerprint (lower-case hex), key type and size, and whether it is
self-signed (issuer equals subject and the certificate's own key verifies its
signature). The server indexes these keys for the search language
(``app.search.endpoint_facts``). A certificate that does not parse gives ``None``: the
scan goes on without the facts. naabu's output carries no certificate (only whether
the port spoke TLS), so it has no facts to read.
"""

from __future__ import annotations

from typing import Any

MAX_SANS = 100


def _utc_text(moment) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _key(public_key) -> tuple[str | None, int | None]:
    from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, ed25519, rsa

    if isinstance(public_key, rsa.RSAPublicKey):
        return "rsa", public_key.key_size
    if isinstance(public_key, ec.EllipticCurvePublicKey):
        return "ec", public_key.curve.key_size
    if isinstance(public_key, dsa.DSAPublicKey):
        return "dsa", public_key.key_size
    if isinstance(public_key, ed25519.Ed25519PublicKey):
        return "ed25519", 256
    if isinstance(public_key, ed448.Ed448PublicKey):
        return "ed448", 456
    return None, None


def certificate_facts(pem: str) -> dict[str, Any] | None:
    """The ``tls`` document of one PEM certificate, or ``None`` when it does not parse."""
    from cryptography import x509

    try:
        cert = x509.load_pem_x509_certificate(pem.strip().encode("ascii", "replace"))
    except ValueError:
        return None
    return _facts(cert)


def certificate_facts_base64_der(text: str) -> dict[str, Any] | None:
    """The ``tls`` document of a base64 DER certificate (masscan's ``X509`` banner), or
    ``None`` when it does not decode or parse."""
    import base64
    import binascii

    from cryptography import x509

    try:
        der = base64.b64decode("".join(text.split()), validate=True)
        cert = x509.load_der_x509_certificate(der)
    except (ValueError, binascii.Error):
        return None
    return _facts(cert)


def _facts(cert) -> dict[str, Any]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import NameOID

    facts: dict[str, Any] = {}
    try:
        names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        if names:
            facts["subject_cn"] = str(names[0].value)
        facts["subject"] = cert.subject.rfc4514_string()
        facts["issuer"] = cert.issuer.rfc4514_string()
    except ValueError:
        pass
    try:
        extension = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        sans = [str(v) for v in extension.value.get_values_for_type(x509.DNSName)]
        sans += [str(v) for v in extension.value.get_values_for_type(x509.IPAddress)]
        if sans:
            facts["sans"] = sans[:MAX_SANS]
    except (x509.ExtensionNotFound, ValueError):
        pass
    facts["not_before"] = _utc_text(cert.not_valid_before_utc)
    facts["not_after"] = _utc_text(cert.not_valid_after_utc)
    facts["sha256"] = cert.fingerprint(hashes.SHA256()).hex()
    facts["serial"] = format(cert.serial_number, "x")
    try:
        key_type, key_bits = _key(cert.public_key())
    except (ValueError, TypeError):  # an unsupported key algorithm
        key_type, key_bits = None, None
    if key_type:
        facts["key_type"], facts["key_bits"] = key_type, key_bits
    facts["self_signed"] = _self_signed(cert)
    return facts


def _self_signed(cert) -> bool:
    if cert.issuer != cert.subject:
        return False
    try:
        cert.verify_directly_issued_by(cert)
    except Exception:  # noqa: BLE001 - any failure (bad signature, unsupported key) means "not shown self-signed"
        return False
    return True
