"""An HTTP proxy on 127.0.0.1 that answers some requests with 503 + Retry-After before
passing the rest to the real server: a 503 storm on demand for the agent's tests."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import requests


@contextmanager
def flaky_proxy(
    upstream: str, should_refuse: Callable[[str, int], bool], retry_after: str = "1"
) -> Iterator[tuple[str, list[str]]]:
    """Yields (proxy URL, log of "STATUS PATH" lines). ``should_refuse(path, n)`` sees the
    path and how many identical requests (same path and body: a retry) came before."""
    seen: dict[tuple[str, bytes], int] = {}
    log: list[str] = []
    lock = threading.Lock()
    session = requests.Session()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            with lock:
                count = seen.get((self.path, body), 0)
                seen[(self.path, body)] = count + 1
            if should_refuse(self.path, count):
                payload = b'{"error":{"code":"pool_timeout","message":"busy"}}'
                self.send_response(503)
                self.send_header("Retry-After", retry_after)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                log.append(f"503 {self.path}")
                return
            headers = {
                k: v
                for k, v in self.headers.items()
                if k.lower() in ("authorization", "content-type")
            }
            answer = session.post(upstream + self.path, data=body, headers=headers, timeout=120)
            self.send_response(answer.status_code)
            for key in ("Content-Type", "Retry-After"):
                if key in answer.headers:
                    self.send_header(key, answer.headers[key])
            self.send_header("Content-Length", str(len(answer.content)))
            self.end_headers()
            self.wfile.write(answer.content)
            log.append(f"{answer.status_code} {self.path}")

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", log
    finally:
        server.shutdown()
        server.server_close()
        session.close()
