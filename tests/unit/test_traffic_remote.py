"""Posting rows to a server: retries on 429/5xx and dropped connections, none on 4xx.

The server here is a real HTTP server on a local port that misbehaves on
purpose (the remote end is the edge of a standalone rollup); the full CLI
against the real application is in tests/integration/test_traffic_cli.py.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from app.traffic.remote import RemoteRowSink, rollups_url
from app.traffic.sinks import SinkError


class FlakyReceiver:
    """Answers the scripted statuses in order, then 200 {"accepted": n}."""

    def __init__(self, script: list[int]):
        self.script = list(script)
        self.requests: list[dict] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append(
                    {"path": self.path, "auth": self.headers["Authorization"], "body": body}
                )
                status = receiver.script.pop(0) if receiver.script else 200
                if status == -1:  # drop the connection without an answer
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if status == 200:
                    answer = {"accepted": len(json.loads(body)["rows"])}
                else:
                    answer = {"error": {"code": f"status_{status}", "message": "scripted"}}
                payload = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                if status in (429, 503):
                    self.send_header("Retry-After", "0")
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def _sink(url: str, delays: list[float], retries: int = 4) -> RemoteRowSink:
    return RemoteRowSink(url, "tkn-123", retries=retries, timeout=5, sleep=delays.append)


def test_retries_transient_failures_then_succeeds():
    with FlakyReceiver([503, -1, 429, 502]) as receiver:
        delays: list[float] = []
        accepted = _sink(receiver.url, delays).write([{"a": 1}, {"a": 2}])
    assert accepted == 2
    assert len(receiver.requests) == 5
    assert {r["path"] for r in receiver.requests} == {"/api/traffic/rollups"}
    assert {r["auth"] for r in receiver.requests} == {"Bearer tkn-123"}
    assert delays == [0.0, 1.0, 0.0, 4.0]  # Retry-After when given, else backoff


def test_gives_up_after_the_retry_budget():
    with FlakyReceiver([503] * 10) as receiver:
        with pytest.raises(SinkError, match="giving up after 3 attempts"):
            _sink(receiver.url, [], retries=2).write([{"a": 1}])
        assert len(receiver.requests) == 3


def test_client_errors_are_not_retried_and_name_the_servers_reason():
    with FlakyReceiver([401]) as receiver:
        with pytest.raises(SinkError) as failure:
            _sink(receiver.url, []).write([{"a": 1}])
        assert len(receiver.requests) == 1
    assert "401" in str(failure.value) and "status_401" in str(failure.value)
    assert "tkn-123" not in str(failure.value)


def test_endpoint_forms():
    assert rollups_url("https://n.example/") == "https://n.example/api/traffic/rollups"
    assert rollups_url("https://n.example/base") == "https://n.example/base/api/traffic/rollups"
    full = "http://n.example:8000/api/traffic/rollups"
    assert rollups_url(full) == full
    with pytest.raises(ValueError):
        rollups_url("file:///etc/passwd")
