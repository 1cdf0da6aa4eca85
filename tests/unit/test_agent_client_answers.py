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
