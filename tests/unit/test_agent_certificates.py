"""TLS certificate and HTTP facts from nmap's XML (ssl-cert's PEM, http-title,
http-server-header) into the observation's ``tls`` and ``http`` documents."""

from __future__ import annotations

import html

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.x509.oid import NameOID

from app.agent.certificates import certificate_facts
from app.agent.nmap_xml import NmapXmlReader
from tests.support.certificates import make_certificate


def _pem(certificate) -> str:
    return certificate.public_bytes(serialization.Encoding.PEM).decode()


def test_a_self_signed_certificate():
    cert, _key = make_certificate("test.local", days=10, sans=("test.local", "127.0.0.1"))
    facts = certificate_facts(_pem(cert))
    assert facts["subject_cn"] == "test.local" and facts["issuer"] == "CN=test.local"
    assert facts["sans"] == ["test.local", "127.0.0.1"]
    assert facts["sha256"] == cert.fingerprint(hashes.SHA256()).hex()
    assert (facts["key_type"], facts["key_bits"], facts["self_signed"]) == ("ec", 256, True)
    assert facts["not_after"].endswith("Z") and len(facts["not_after"]) == 20


def test_a_certificate_signed_by_a_ca_is_not_self_signed():
    ca, ca_key = make_certificate("Test CA", key_kind="rsa")
    leaf, _ = make_certificate(
        "shop.example", issuer_key=ca_key, issuer_name=ca.subject, key_kind="rsa"
    )
    facts = certificate_facts(_pem(leaf))
    assert facts["issuer"] == "CN=Test CA" and facts["self_signed"] is False
    assert (facts["key_type"], facts["key_bits"]) == ("rsa", 2048)
    # Same name, another key: a forged "self-signed" claim is not believed.
    forged, _ = make_certificate(
        "Test CA",
        issuer_key=ca_key,
        issuer_name=x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Test CA")]),
    )
    assert certificate_facts(_pem(forged))["self_signed"] is False


def test_a_pem_that_does_not_parse_gives_nothing():
    assert certificate_facts("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----") is None
    assert certificate_facts("garbage") is None


def _xml(pem: str, title: str, server: str) -> bytes:
    escaped = html.escape(pem).replace("\n", "&#xa;")
    title, server = html.escape(title), html.escape(server)
    return f"""<?xml version="1.0"?>
<nmaprun scanner="nmap" start="1764650000">
<host endtime="1764650100"><status state="up"/><address addr="192.0.2.9" addrtype="ipv4"/>
<ports>
<port protocol="tcp" portid="443"><state state="open" reason="syn-ack"/>
<service name="http" tunnel="ssl" product="nginx" method="probed" conf="10"/>
<script id="http-title" output="{title}"><elem key="title">{title}</elem></script>
<script id="http-server-header" output="{server}"><elem>{server}</elem></script>
<script id="ssl-cert" output="Subject: commonName=x">
<table key="subject"><elem key="commonName">x</elem></table>
<elem key="pem">{escaped}</elem></script>
</port>
<port protocol="tcp" portid="80"><state state="open" reason="syn-ack"/>
<service name="http" method="probed" conf="10"/>
<script id="http-title" output="Site doesn&apos;t have a title (text/html)."/>
</port>
</ports></host></nmaprun>""".encode()


def test_nmap_scripts_become_tls_and_http_documents():
    cert, _ = make_certificate("shop.example", days=5, sans=("shop.example",))
    reader = NmapXmlReader()
    tls_port, plain_port = (
        reader.feed(_xml(_pem(cert), "Shop & login", "nginx/1.22.1")) + reader.close()
    )
    assert tls_port["service"]["name"] == "https"
    assert tls_port["http"] == {"title": "Shop & login", "server": "nginx/1.22.1"}
    assert tls_port["tls"]["subject_cn"] == "shop.example"
    assert tls_port["tls"]["sha256"] == cert.fingerprint(hashes.SHA256()).hex()
    assert "ssl-cert" in tls_port["details"]["scripts"]  # the text output stays shown
    # A page without a title has no http document.
    assert "http" not in plain_port and "tls" not in plain_port
