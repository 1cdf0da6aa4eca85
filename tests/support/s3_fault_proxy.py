"""A real S3-protocol server on loopback for tests, and a fault proxy in front of it.

``start_s3_server()`` runs moto's standalone server (``moto[server]``) in a
thread on 127.0.0.1 with a free port. ``FaultProxy`` is a small HTTP proxy
between the client and that server which can delay, fail (500, 503,
``SlowDown``) or drop chosen requests, and which counts concurrent object
DELETEs and can hold them at a gate, so a test can see exactly how many are
in flight at once.
"""

from __future__ import annotations

import http.client
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
}
ERROR_MESSAGES = {
    "SlowDown": (503, "Please reduce your request rate."),
    "ServiceUnavailable": (503, "Service is unable to handle request."),
    "InternalError": (500, "We encountered an internal error. Please try again."),
}


def start_s3_server():
    """moto's S3 server on 127.0.0.1:<free port>; returns (server, endpoint_url)."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    _host, port = server.get_host_and_port()  # the port the OS chose
    return server, f"http://127.0.0.1:{port}"


@dataclass
class Rule:
    """What to do with matching requests: ``fail`` (an S3 error), ``drop`` or ``delay``."""

    action: str
    method: str | None = None
    path_contains: str | None = None
    error_code: str = "InternalError"
    delay_seconds: float = 0.0
    times: int | None = None  # None: every matching request
    hits: int = 0

    def matches(self, method: str, path: str) -> bool:
        if self.times is not None and self.hits >= self.times:
            return False
        if self.method and self.method != method:
            return False
        return not (self.path_contains and self.path_contains not in path)


@dataclass
class ProxyStats:
    deletes_in_flight: int = 0
    max_deletes_in_flight: int = 0
    deletes_started: int = 0
    deletes_finished: int = 0
    requests: list[tuple[str, str]] = field(default_factory=list)
    faults: int = 0
    raw_requests: list[bytes] = field(default_factory=list)


class FaultProxy:
    def __init__(self, upstream_url: str):
        host_port = upstream_url.split("://", 1)[1]
        self.upstream_host, port = host_port.split(":")
        self.upstream_port = int(port)
        self.rules: list[Rule] = []
        self.stats = ProxyStats()
        self.delete_gate: threading.Semaphore | None = None
        self.record_raw = False
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    data = bytearray()
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return bytes(data)
                        data += self.rfile.read(size)
                        self.rfile.readline()
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""

            def _handle(self) -> None:
                proxy._serve(self)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        if self.delete_gate is not None:
            for _ in range(1000):
                self.delete_gate.release()
        self._server.shutdown()
        self._server.server_close()

    def add(self, rule: Rule) -> Rule:
        with self._lock:
            self.rules.append(rule)
        return rule

    def clear(self) -> None:
        with self._lock:
            self.rules.clear()

    def _match(self, method: str, path: str) -> Rule | None:
        with self._lock:
            for rule in self.rules:
                if rule.matches(method, path):
                    rule.hits += 1
                    return rule
        return None

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        method, path = handler.command, handler.path
        body = handler._body()  # type: ignore[attr-defined]
        with self._lock:
            self.stats.requests.append((method, path))
            if self.record_raw:
                self.stats.raw_requests.append(
                    f"{method} {path}\n{handler.headers}".encode() + body
                )
        rule = self._match(method, path)
        if rule is not None:
            with self._lock:
                self.stats.faults += 1
            if rule.action == "drop":
                handler.close_connection = True
                handler.connection.shutdown(2)
                return
            if rule.action == "delay":
                time.sleep(rule.delay_seconds)
            elif rule.action == "fail":
                status, message = ERROR_MESSAGES.get(rule.error_code, (500, "error"))
                payload = (
                    '<?xml version="1.0" encoding="UTF-8"?>'
                    f"<Error><Code>{rule.error_code}</Code><Message>{message}</Message></Error>"
                ).encode()
                handler.send_response(status)
                handler.send_header("Content-Type", "application/xml")
                handler.send_header(
                    "Content-Length", "0" if method == "HEAD" else str(len(payload))
                )
                handler.end_headers()
                if method != "HEAD":
                    handler.wfile.write(payload)
                return
        is_object_delete = method == "DELETE" and path.count("/") >= 2 and "uploadId" not in path
        if is_object_delete:
            with self._lock:
                self.stats.deletes_in_flight += 1
                self.stats.deletes_started += 1
                self.stats.max_deletes_in_flight = max(
                    self.stats.max_deletes_in_flight, self.stats.deletes_in_flight
                )
            if self.delete_gate is not None:
                self.delete_gate.acquire(timeout=60)
        try:
            self._forward(handler, method, path, body)
        finally:
            if is_object_delete:
                with self._lock:
                    self.stats.deletes_in_flight -= 1
                    self.stats.deletes_finished += 1

    def _forward(self, handler, method: str, path: str, body: bytes) -> None:
        upstream = http.client.HTTPConnection(self.upstream_host, self.upstream_port, timeout=60)
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in HOP_BY_HOP}
        if body or method in {"PUT", "POST"}:
            headers["Content-Length"] = str(len(body))
        try:
            upstream.request(method, path, body=body or None, headers=headers)
            response = upstream.getresponse()
            data = response.read()
            handler.send_response(response.status)
            for key, value in response.getheaders():
                if key.lower() in HOP_BY_HOP:
                    continue
                if key.lower() == "content-length" and method != "HEAD":
                    continue  # the body is re-sent whole, with its own length
                handler.send_header(key, value)
            if method != "HEAD":
                handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            if method != "HEAD":
                handler.wfile.write(data)
        finally:
            upstream.close()
