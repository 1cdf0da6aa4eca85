"""The console's help for the asset search language: the syntax, every field of the
language (``query_language.FIELDS``, so a field is never missing from the page) and
examples that run a search. The full reference is docs/search-language.md."""

from __future__ import annotations

from flask import render_template, url_for

from app.search.query_language import FIELDS, MAX_CLAUSES, MAX_QUERY_CHARS
from app.web import blueprint
from app.web.access import page_user

# What each field holds and how its value matches, in a reader's words (one line each).
FIELD_HELP: dict[str, str] = {
    "ip": "the address (192.0.2.1); a CIDR block means net:",
    "net": "the address is inside a CIDR block (10.0.0.0/8)",
    "port": "the port number",
    "transport": "tcp or udp",
    "state": "the scanner's port state",
    "status": "open, or gone since a later scan missed it (the default shows open only)",
    "service": "the service name, whole value, any case",
    "product": "the product, whole value, any case",
    "version": "the product version, whole value, any case",
    "hostname": "the host name, whole value, any case",
    "banner": "the service banner contains the text, any case",
    "tag": "one of the asset's tags, exact",
    "first_seen": "when the endpoint was first seen",
    "last_seen": "when it was last seen",
    "title": "the HTTP page title contains the text",
    "server": "the HTTP Server header contains the text",
    "cert.subject": "the certificate subject (CN) contains the text",
    "cert.issuer": "the certificate issuer contains the text",
    "cert.san": "one of the certificate's alternative names, whole name, any case",
    "cert.fingerprint": "the certificate's SHA-256 (64 hex digits)",
    "cert.expires": "when the certificate expires",
    "cert.self_signed": "true or false: issuer equals subject",
    "cert.key_type": "the key type (rsa, ec …), any case",
    "cert.key_bits": "the public key size",
}

# One example per field: a query that reads naturally and runs as it is.
FIELD_EXAMPLES: dict[str, str] = {
    "ip": "ip:192.0.2.1",
    "net": "net:10.0.0.0/8",
    "port": "port:443",
    "transport": "transport:udp",
    "state": "state:filtered",
    "status": "status:gone",
    "service": "service:ssh",
    "product": 'product:"Apache httpd"',
    "version": "version:9.6",
    "hostname": "hostname:www.example.com",
    "banner": "banner:OpenSSH",
    "tag": "tag:dmz",
    "first_seen": "first_seen:>7d",
    "last_seen": "last_seen:<30d",
    "title": 'title:"login"',
    "server": "server:nginx",
    "cert.subject": "cert.subject:example.com",
    "cert.issuer": 'cert.issuer:"Let\'s Encrypt"',
    "cert.san": "cert.san:www.example.com",
    "cert.fingerprint": "cert.fingerprint:" + "0" * 64,
    "cert.expires": "cert.expires:<30d",
    "cert.self_signed": "cert.self_signed:true",
    "cert.key_type": "cert.key_type:rsa",
    "cert.key_bits": "cert.key_bits:<2048",
}

COMBINED_EXAMPLES = (
    ("web servers outside the lab", "port:443 -tag:lab"),
    ("SSH or Telnet", "port:22 OR port:23"),
    ("certificates expiring within 30 days", "cert.expires:<30d"),
    ("nginx not on port 80", "product:nginx -port:80"),
    ("free text in banners, products and host names", "tomcat"),
)


@blueprint.get("/help/search")
@page_user
def search_help():
    fields = [
        {
            "name": name,
            "help": FIELD_HELP[name],
            "ordered": field.ordered,
            "choices": field.choices,
            "example": FIELD_EXAMPLES[name],
            "link": url_for("web.assets", q=FIELD_EXAMPLES[name]),
        }
        for name, field in FIELDS.items()
    ]
    examples = [(what, query, url_for("web.assets", q=query)) for what, query in COMBINED_EXAMPLES]
    return render_template(
        "console/search_help.html",
        fields=fields,
        examples=examples,
        max_chars=MAX_QUERY_CHARS,
        max_clauses=MAX_CLAUSES,
    )
