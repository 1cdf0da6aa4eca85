"""Outbound HTTP for alert channels, with the address rule applied where it matters.

A webhook target that resolves to a loopback, link-local, private or otherwise
non-global address is refused unless ``[alerts] allow_private_targets`` is on. The
check is made on the address of the socket actually connected (``getpeername``), after
resolution, so a name that resolves to a public address for a check and a private one
for the connection (DNS rebinding) cannot get through: there is only one resolution,
and the connection is made to the address that was checked. TLS still verifies the
certificate against the host name. Timeouts bound connect and every read; redirects are
followed only to the same scheme, host and port (at most three); a response body is
read up to ``max_response_bytes`` and no further.
"""

from __future__ import annotations

import http.client
import ipaddress
import re
import socket
import ssl
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import idna

MAX_REDIRECTS = 3


class TemporaryDeliveryError(Exception):
    """Worth retrying: the peer was unreachable, timed out, or answered 408/429/5xx."""


class PermanentDeliveryError(Exception):
    """Retrying cannot help: a refused target, a 4xx, a redirect to another host."""


@dataclass(frozen=True)
class OutboundPolicy:
    allow_private: bool
    timeout_seconds: float
    max_response_bytes: int


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes


def address_refused(address: str) -> str | None:
    """Why ``address`` may not be a target by default (None: a global address)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    mapped = getattr(ip, "ipv4_mapped", None)
    if mapped is not None:
        ip = mapped
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip.is_private:
        return "private"
    if not ip.is_global or ip.is_multicast:
        return "not a global address"
    return None


# A host name's labels (letters, digits, hyphens, not at a label's ends; IDNA A-labels
# included) or an IP literal (IPv6 in brackets arrives here without them).
_HOST = re.compile(
    r"(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.?"
    r"|[0-9a-f:.]*:[0-9a-f:.%a-z]*"
)


def _ascii_host(host: str) -> str:
    """An internationalised host name as its A-labels (what is sent); as is otherwise."""
    if host.isascii():
        return host
    try:
        return idna.encode(host, uts46=True).decode("ascii")
    except idna.IDNAError:
        return host  # refused by the pattern


def check_url(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of an http(s) URL; ValueError when it is not one."""
    if any(ch.isspace() or not ch.isprintable() for ch in url):
        raise ValueError("the URL must not hold spaces or control characters")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ValueError("the URL must be http:// or https://")
    if not parts.hostname:
        raise ValueError("the URL has no host")
    if not _HOST.fullmatch(_ascii_host(parts.hostname)):
        raise ValueError(f"{parts.hostname!r} is not a host name or address")
    if parts.username or parts.password:
        raise ValueError("credentials in the URL are not allowed; the channel is signed")
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:  # out of range, not a number, or 0 (which nothing listens on)
        raise ValueError("the URL's port is not valid")
    return parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80)


# Apprise's plugins open their own connections (through requests, smtplib, ...), so the
# address rule cannot be applied by our own connect code. It is applied by an audit hook
# on ``socket.connect`` instead: every connection the sending thread makes while
# ``guarded_connections`` is active is judged on the address it is about to connect to,
# after the library's own resolution (DNS rebinding gains nothing). The guard is a context
# variable, not a thread-local: Apprise runs a plugin on its worker pool inside a copy of
# the caller's context, so the guard follows the send there and nowhere else. Audit hooks
# cannot be removed, so one is installed once per process and does nothing outside a guard.
_guard: ContextVar[list[str] | None] = ContextVar("netmap_outbound_guard", default=None)
_hook_lock = threading.Lock()
_hook_installed = False


class RefusedAddress(ConnectionRefusedError):
    """Raised inside the library's connect call; its own error handling takes it from there."""


def _judge_connect(event: str, args: tuple) -> None:
    if event != "socket.connect":
        return
    refused = _guard.get()
    if refused is None:
        return
    sock, address = args
    if sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    host = str(address[0])
    try:
        why = address_refused(host)
    except ValueError:
        # Connecting by name: resolve the way the socket will, and judge every answer.
        why = next(
            (w for a in _addresses(host, int(address[1])) if (w := address_refused(a[4][0]))),
            None,
        )
    if why:
        refused.append(f"{host} ({why})")
        raise RefusedAddress(f"target address {host} refused ({why})")


@contextmanager
def guarded_connections(policy: OutboundPolicy) -> Iterator[list[str]]:
    """Judge every connection made in the block's context; yields the refusals."""
    global _hook_installed
    if policy.allow_private:
        yield []
        return
    with _hook_lock:
        if not _hook_installed:
            sys.addaudithook(_judge_connect)
            _hook_installed = True
    refusals: list[str] = []
    token = _guard.set(refusals)
    try:
        yield refusals
    finally:
        _guard.reset(token)


def _addresses(host: str, port: int) -> list[tuple]:
    try:
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise TemporaryDeliveryError(f"cannot resolve {host}: {exc}") from exc


def _connect(host: str, port: int, policy: OutboundPolicy) -> socket.socket:
    refused = []
    last_error: OSError | None = None
    for family, kind, proto, _, sockaddr in _addresses(host, port):
        if not policy.allow_private and (why := address_refused(sockaddr[0])):
            refused.append(f"{sockaddr[0]} ({why})")
            continue
        sock = socket.socket(family, kind, proto)
        sock.settimeout(policy.timeout_seconds)
        try:
            sock.connect(sockaddr)
        except OSError as exc:
            sock.close()
            last_error = exc
            continue
        # The rule is judged on the peer of this very socket.
        peer = sock.getpeername()[0]
        if not policy.allow_private and (why := address_refused(peer)):
            sock.close()
            refused.append(f"{peer} ({why})")
            continue
        return sock
    if last_error is not None:
        raise TemporaryDeliveryError(f"cannot connect to {host}:{port}: {last_error}")
    raise PermanentDeliveryError(
        "target refused: " + ", ".join(refused) + " (set [alerts] allow_private_targets)"
    )


def post(url: str, body: bytes, headers: dict[str, str], policy: OutboundPolicy) -> Response:
    """POST ``body`` to ``url``; a 2xx answer is returned, anything else raises."""
    for _ in range(MAX_REDIRECTS + 1):
        scheme, host, port = check_url(url)
        parts = urlsplit(url)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        sock = _connect(host, port, policy)
        try:
            if scheme == "https":
                sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
            connection = http.client.HTTPConnection(host, port, timeout=policy.timeout_seconds)
            connection.sock = sock
            connection.request("POST", path, body=body, headers=headers)
            answer = connection.getresponse()
            data = answer.read(policy.max_response_bytes)
            status, location = answer.status, answer.getheader("Location")
        except (OSError, http.client.HTTPException) as exc:
            raise TemporaryDeliveryError(f"{type(exc).__name__}: {exc}") from exc
        finally:
            sock.close()
        if 200 <= status < 300:
            return Response(status, data)
        if status in (301, 302, 303, 307, 308) and location:
            target = urljoin(url, location)
            try:
                same = check_url(target) == (scheme, host, port)
            except ValueError:
                same = False
            if not same:
                raise PermanentDeliveryError(f"HTTP {status}: redirect to another host refused")
            url = target
            continue
        message = f"HTTP {status}: {data[:200].decode('utf-8', 'replace')}"
        if status in (408, 425, 429) or status >= 500:
            raise TemporaryDeliveryError(message)
        raise PermanentDeliveryError(message)
    raise PermanentDeliveryError("too many redirects")
