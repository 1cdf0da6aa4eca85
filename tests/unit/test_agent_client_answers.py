"""How the agent reads the server's refusals of an execution (docs/scanner-protocol.md)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from app.agent.client import ExecutionCancelled, LeaseLost, ScannerClient


def _serving(status: int, code: str):
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = json.dumps({"error": {"code": code, "message": code}}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.parametrize(
    ("status", "code", "cancelled"),
    [
        (409, "execution_cancelled", True),
        # A deleted task's execution, removed within seconds of the cancel: the protocol
        # says it means the same; it was taken for a lost lease.
        (404, "execution_not_found", True),
        (409, "lease_lost", False),
    ],
)
def test_a_cancel_and_a_removed_execution_read_alike(status, code, cancelled):
    server = _serving(status, code)
    client = ScannerClient(f"http://127.0.0.1:{server.server_address[1]}", "nms_test")
    try:
        with pytest.raises(LeaseLost) as caught:
            client.renew(7, "00000000-0000-0000-0000-000000000000")
        assert isinstance(caught.value, ExecutionCancelled) is cancelled
        assert caught.value.code == code
    finally:
        client.close()
        server.shutdown()
        server.server_close()


def test_a_kept_alive_connection_closed_under_a_request_is_tried_once_more():
    # The server's keep-alive timeout closes an idle connection just as the agent's next
    # poll goes out on it: that used to be a "claim failed … retrying in 4s".
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    answered = []

    def read_request(conn) -> bytes:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return b""
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(
            (
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            ),
            0,
        )
        while len(body) < length:
            body += conn.recv(65536)
        return head

    def answer(conn, name: str) -> None:
        read_request(conn)
        payload = b'{"lease_expires_at": "2026-12-07T12:00:00+00:00"}'
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload)
        )
        answered.append(name)

    def serve():
        first, _ = listener.accept()
        with first:
            answer(first, "first")  # kept alive
            read_request(first)  # the next request on it: closed unanswered
        second, _ = listener.accept()
        with second:
            answer(second, "second")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    client = ScannerClient(f"http://127.0.0.1:{listener.getsockname()[1]}", "nms_test")
    try:
        client.renew(7, "00000000-0000-0000-0000-000000000000")
        client.renew(7, "00000000-0000-0000-0000-000000000000")  # no RetryLater
    finally:
        client.close()
        thread.join(timeout=10)
        listener.close()
    assert answered == ["first", "second"]
