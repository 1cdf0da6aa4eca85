"""The console's help for the asset search language: the syntax, every field of the
language (``query_language.FIELDS``, so a field is never missing from the page) and
examples that run a search. The full reference is docs/search-language.md."""

from __future__ import annotations

from flask import render_template, url_for

from app.search.query_language import FIELDS, MAX_CLAUSES, MAX_QUERY_CHARS
from app.web import blueprint
from app.web.access import page_user

# Each field: what it holds and how a value matches, in a reader's words, and a query that
# reads naturally and runs as it is (a field of the language missing here fails the page's test).
FIELD_HELP: dict[str, tuple[str, str]] = {
    "ip": ("the address (192.0.2.1); a CIDR block means net:", "ip:192.0.2.1"),
    "net": ("the address is inside a CIDR block (10.0.0.0/8)", "net:10.0.0.0/8"),
    "port": ("the port number", "port:443"),
    "transport": ("tcp or udp", "transport:udp"),
    "state": ("the scanner's port state", "state:filtered"),
    "status": (
        "open, or gone since a later scan missed it (the default shows open only)",
        "status:gone",
    ),
    "service": ("the service name, whole value, any case", "service:ssh"),
    "product": ("the product, whole value, any case", 'product:"Apache httpd"'),
    "version": ("the product version, whole value, any case", "version:9.6"),
    "hostname": ("the host name, whole value, any case", "hostname:www.example.com"),
    "banner": ("the service banner contains the text, any case", "banner:OpenSSH"),
    "tag": ("one of the asset's tags, exact", "tag:dmz"),
    "first_seen": ("when the endpoint was first seen", "first_seen:>7d"),
    "last_seen": ("when it was last seen", "last_seen:<30d"),
    "title": ("the HTTP page title contains the text", 'title:"login"'),
    "server": ("the HTTP Server header contains the text", "server:nginx"),
    "cert.subject": ("the certificate subject (CN) contains the text", "cert.subject:example.com"),
    "cert.issuer": ("the certificate issuer contains the text", 'cert.issuer:"Let\'s Encrypt"'),
    "cert.san": (
        "one of the certificate's alternative names, whole name, any case",
        "cert.san:www.example.com",
    ),
    "cert.fingerprint": (
        "the certificate's SHA-256 (64 hex digits)",
        "cert.fingerprint:" + "0" * 64,
    ),
    "cert.expires": ("when the certificate expires", "cert.expires:<30d"),
    "cert.self_signed": ("true or false: issuer equals subject", "cert.self_signed:true"),
    "cert.key_type": ("the key type (rsa, ec …), any case", "cert.key_type:rsa"),
    "cert.key_bits": ("the public key size", "cert.key_bits:<2048"),
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
            "help": FIELD_HELP[name][0],
            "ordered": field.ordered,
            "choices": field.choices,
            "example": FIELD_HELP[name][1],
            "link": url_for("web.assets", q=FIELD_HELP[name][1]),
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
