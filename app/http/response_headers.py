"""Security headers on every response and the session cookie's Secure flag (IDN-1, IDN-2).

Every response says ``nosniff`` and sends no referrer; API, auth and console
responses are never cached (they carry personal data and CSRF tokens); HTML gets a
restrictive Content-Security-Policy (own origin only, no inline script, no
framing) and everything else one that allows nothing at all. A view that sets
its own Cache-Control or CSP keeps it.

The session cookie is ``Secure`` unless the request is plain HTTP to a
loopback address (``netmap up`` on 127.0.0.1, where there is no TLS and the
traffic never leaves the machine), or ``[security] session_cookie_secure`` is
false.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from flask import Flask, Response, request
from flask.sessions import SecureCookieSessionInterface

from app.http import context

HTML_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
NON_HTML_CSP = "default-src 'none'; frame-ancestors 'none'"
# The console's pages too: they show personal data, CSRF tokens and signed download
# links that work without a session (its static files set their own caching).
_NO_STORE_PREFIXES = ("/api/", "/metrics", "/readyz", "/console")


def is_loopback_host(host: str) -> bool:
    """Whether a Host header names this machine (127.0.0.0/8, ::1, localhost)."""
    try:
        hostname = urlsplit("//" + host).hostname or ""
    except ValueError:
        return False
    if hostname == "localhost" or hostname.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(hostname).is_loopback
    except ValueError:
        return False


class LoopbackAwareSessionInterface(SecureCookieSessionInterface):
    def get_cookie_secure(self, app: Flask) -> bool:
        if not context.settings().security.session_cookie_secure:
            return False
        return request.is_secure or not is_loopback_host(request.host)


def add_security_headers(response: Response) -> Response:
    headers = response.headers
    headers.setdefault("X-Content-Type-Options", "nosniff")
    headers.setdefault("Referrer-Policy", "no-referrer")
    if response.mimetype == "text/html":
        headers.setdefault("Content-Security-Policy", HTML_CSP)
        headers.setdefault("X-Frame-Options", "DENY")
    else:
        headers.setdefault("Content-Security-Policy", NON_HTML_CSP)
    if request.path.startswith(_NO_STORE_PREFIXES) and "Cache-Control" not in headers:
        headers["Cache-Control"] = "no-store"
    return response


def install_response_security(app: Flask) -> None:
    app.session_interface = LoopbackAwareSessionInterface()
    app.after_request(add_security_headers)
