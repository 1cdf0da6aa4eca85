"""Posting rollup rows to a netmap server (standalone mode on an nginx host, TRF-6).

``RemoteRowSink`` sends each batch as ``POST /api/traffic/rollups`` with the
rollup token as a bearer token. Connection failures, timeouts, 408/425/429 and
5xx answers are retried with exponential backoff (honouring ``Retry-After``);
other answers (400 validation, 401 token) fail at once with the server's error
code and message. The server upserts rows by key, so a batch that was stored
but whose answer was lost is harmless to send again. The token is never
logged or put in an error message.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable

import orjson

from app.traffic.sinks import SinkError

ROLLUPS_PATH = "/api/traffic/rollups"
_RETRYABLE = {408, 425, 429}


def rollups_url(endpoint: str) -> str:
    """The ingest URL from a server base URL or the full rollups URL."""
    parsed = urllib.parse.urlsplit(endpoint)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(f"endpoint must be an http(s) URL, got {endpoint!r}")
    path = parsed.path.rstrip("/")
    if not path.endswith(ROLLUPS_PATH):
        path += ROLLUPS_PATH
    return urllib.parse.urlunsplit((parsed.scheme, parsed.netloc, path, "", ""))


def _error_text(body: bytes) -> str:
    try:
        error = json.loads(body)["error"]
        return f"{error.get('code')}: {error.get('message')}"
    except (ValueError, KeyError, TypeError):
        return body[:200].decode("utf-8", "replace")


class RemoteRowSink:
    writes_database = False  # rows go to another server over HTTP

    def __init__(
        self,
        endpoint: str,
        token: str,
        *,
        retries: int = 5,
        timeout: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
        report: Callable[[str], None] | None = None,
    ):
        if not token:
            raise ValueError("a rollup token is required")
        self.url = rollups_url(endpoint)
        self._token = token
        self.retries = retries
        self.timeout = timeout
        self.sleep = sleep
        self.report = report or (lambda _message: None)
        self.requests = 0

    def write(self, rows: list[dict]) -> int:
        # orjson: compact UTF-8 like json.dumps(separators=(",", ":"), ensure_ascii=False),
        # several times faster on a batch of thousands of rows.
        body = orjson.dumps({"rows": rows})
        attempt = 0
        while True:
            request = urllib.request.Request(  # noqa: S310 - scheme checked in rollups_url
                self.url,
                data=body,
                method="POST",
                headers={
                    "Content-Type": "application/json",
                    "Authorization": f"Bearer {self._token}",
                    "User-Agent": "netmap-traffic-rollup",
                },
            )
            retry_after: float | None = None
            self.requests += 1
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                    answer = json.loads(response.read() or b"{}")
                    return int(answer.get("accepted", 0))
            except urllib.error.HTTPError as exc:
                detail = _error_text(exc.read())
                if exc.code not in _RETRYABLE and exc.code < 500:
                    raise SinkError(f"{self.url} answered {exc.code} ({detail})") from None
                problem = f"{exc.code} ({detail})"
                header = exc.headers.get("Retry-After") if exc.headers else None
                if header and header.strip().isdigit():
                    retry_after = float(header)
            except (
                urllib.error.URLError,
                TimeoutError,
                ConnectionError,
                http.client.HTTPException,
            ) as exc:
                problem = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
            except ValueError as exc:
                problem = f"unreadable answer ({exc})"
            attempt += 1
            if attempt > self.retries:
                raise SinkError(f"{self.url}: giving up after {attempt} attempts: {problem}")
            delay = retry_after if retry_after is not None else min(30.0, 0.5 * 2 ** (attempt - 1))
            self.report(f"post failed ({problem}); retry {attempt}/{self.retries} in {delay:g}s")
            self.sleep(delay)
