"""A webhook receiver on loopback for alert tests: verifies every Standard Webhooks
signature with the ``standardwebhooks`` library and counts message ids.

``POST /hook`` checks ``webhook-id/-timestamp/-signature`` against the configured
secrets (any one may match, as during a rotation); ``POST /apprise`` takes Apprise's
``json://`` posts (unsigned). ``fail_next`` answers the next N requests with 503 (the
receiver "down"); every request, failed or not, is recorded.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    status: int
    verified: bool | None = None

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class WebhookReceiver:
    secrets: list[str] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    fail_next: int = 0
    redirect_to: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    # When set, a request is recorded and then held unanswered until ``release`` is set.
    hold: bool = False
    arrived: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    def start(self) -> WebhookReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                headers = {k.lower(): v for k, v in self.headers.items()}
                with receiver.lock:
                    status = 200
                    if receiver.redirect_to:
                        status = 302
                    elif receiver.fail_next > 0:
                        receiver.fail_next -= 1
                        status = 503
                    verified = None
                    if self.path.startswith("/hook"):
                        verified = receiver._verify(body, headers)
                        if not verified and status == 200:
                            status = 401
                    receiver.received.append(Received(self.path, headers, body, status, verified))
                    held = receiver.hold
                receiver.arrived.set()
                if held:
                    receiver.release.wait(60)
                self.send_response(status)
                if status == 302:
                    self.send_header("Location", receiver.redirect_to or "/")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    @property
    def apprise_url(self) -> str:
        return f"json://127.0.0.1:{self.port}/apprise"

    def _verify(self, body: bytes, headers: dict[str, str]) -> bool:
        for secret in self.secrets:
            try:
                Webhook(secret).verify(body, headers)
                return True
            except WebhookVerificationError:
                continue
        return False

    def hooks(self, *, ok_only: bool = True) -> list[Received]:
        with self.lock:
            return [
                r
                for r in self.received
                if r.path.startswith("/hook") and (r.status == 200 or not ok_only)
            ]

    def apprise_posts(self) -> list[Received]:
        with self.lock:
            return [r for r in self.received if r.path.startswith("/apprise")]

    def ids(self) -> Counter:
        return Counter(r.headers["webhook-id"] for r in self.hooks(ok_only=False))
