"""Loopback listeners for real scans in tests: an HTTP server, a TCP server that sends a
banner (non-ASCII on purpose) and a TLS listener, each on 127.0.0.1 (or ::1) and a free port.

They run in daemon threads of the test process and are closed by the context manager.
"""

from __future__ import annotations

import datetime
import http.server
import socket
import socketserver
import ssl
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

BANNER = "220 netmap-test ESMTP Grüße ✓ ready\r\n"


class _Quiet(http.server.BaseHTTPRequestHandler):
    # Python's own server name, which nmap's service probes recognise (SimpleHTTPServer).
    server_version = "SimpleHTTP/0.6"
    timeout = 5

    def do_GET(self) -> None:
        body = b"<html><title>netmap test</title><body>ok</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_HEAD = do_GET

    def log_message(self, *args) -> None:
        pass


class _ThreadingHTTP(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class _Banner(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        try:
            self.request.sendall(BANNER.encode("utf-8"))
            self.request.settimeout(1)
            self.request.recv(1024)
        except OSError:
            pass


class _ThreadingTCP(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True


def _for_host(cls: type, host: str) -> type:
    """The server class bound to the address family of ``host``."""
    if ":" not in host:
        return cls
    return type(cls.__name__ + "V6", (cls,), {"address_family": socket.AF_INET6})


def self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "netmap-test.local")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


class _TlsHTTP(_ThreadingHTTP):
    context: ssl.SSLContext

    def get_request(self):
        # The handshake happens on the handler's thread (first read), never in the accept
        # loop: a probe that speaks no TLS must not stall every other connection.
        sock, address = super().get_request()
        sock.settimeout(5)
        return self.context.wrap_socket(
            sock, server_side=True, do_handshake_on_connect=False
        ), address

    def handle_error(self, request, client_address) -> None:
        pass  # probes that are not TLS end in handshake errors; expected


@dataclass(frozen=True)
class Listeners:
    http_port: int
    banner_port: int
    tls_port: int
    closed_port: int

    @property
    def ports(self) -> list[int]:
        return [self.http_port, self.banner_port, self.tls_port]


def _serve(stack: ExitStack, server: socketserver.BaseServer) -> None:
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1})
    thread.daemon = True
    thread.start()
    stack.callback(server.server_close)
    stack.callback(server.shutdown)


def closed_port() -> int:
    """A port nothing listens on (bound and released at once)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def loopback_listeners(directory: Path, host: str = "127.0.0.1") -> Iterator[Listeners]:
    with ExitStack() as stack:
        http_server = _for_host(_ThreadingHTTP, host)((host, 0), _Quiet)
        _serve(stack, http_server)
        banner_server = _for_host(_ThreadingTCP, host)((host, 0), _Banner)
        _serve(stack, banner_server)
        cert, key = self_signed_certificate(directory)
        tls_server = _for_host(_TlsHTTP, host)((host, 0), _Quiet)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        tls_server.context = context
        _serve(stack, tls_server)
        yield Listeners(
            http_port=http_server.server_address[1],
            banner_port=banner_server.server_address[1],
            tls_port=tls_server.server_address[1],
            closed_port=closed_port(),
        )
