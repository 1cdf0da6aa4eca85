"""The web worker: gunicorn's threaded worker, with request heads read by the event loop.

gunicorn's ``gthread`` worker hands a connection to a thread as soon as its
first bytes arrive, and the thread then blocks until the whole request head
is in. Eight clients sending one header line every two seconds therefore hold
all threads of a default deployment (2 workers x 4 threads) and ``/healthz``
times out for everyone. The alternatives gunicorn offers do not fit this app:
``gevent`` needs the whole process monkey-patched (psycopg2 blocks the hub
without psycogreen; the report renderer's threads and worker pipes would
change semantics), ``tornado`` runs the WSGI app on its event loop one request
at a time per worker, and the ASGI worker needs an ASGI application.

So this worker keeps ``gthread`` and changes one thing: a connection's request
head is read without blocking by the worker's own event loop (the same poller
gthread uses for kept-alive connections) into a buffer, and only a complete
head (or one over the size limit, for the parser to refuse) goes to a thread,
with the buffered bytes handed to gunicorn's parser. A head not complete
within ``[server] header_timeout_seconds`` is closed. A slow client costs a
buffer, not a thread.

And one more: a request with a large body (``LARGE_BODY_BYTES``: a scanner's batch)
closes its connection once it is answered, so the scanner's next batch arrives on a
new connection, which the listening socket hands to whichever worker accepts first:
a worker busy with batches answers its event loop late (its threads hold the
interpreter), so an idle one takes it. A kept-alive connection instead stays with
the worker that accepted it, and every batch on it with that worker: measured with
four scanners uploading at once (``netmap bench upload --http --clients 4``), one
worker did all the work (7.0 CPU seconds against 0.4) while the other core had only
PostgreSQL to run; closing after each batch split it 4.1 to 3.6 and raised the fill
rate from 14,300 to 20,500 observations/s. A new connection costs well under a
millisecond against the tens to hundreds a batch takes; behind the proxy it is the
proxy's upstream connection that is renewed, not the scanner's.

Request *bodies* are buffered the same way: a head announcing a
``Content-Length`` up to ``[server] body_buffer_max_bytes`` keeps its
connection on the event loop until the whole body is in (within ``[server]
body_timeout_seconds`` of the head, else the connection is closed), so a
client trickling its body costs a buffer, not a thread. Larger bodies (result
imports of hundreds of MB), chunked bodies and ``Expect: 100-continue`` go to
a thread once the head is in, as before; in production a reverse proxy that
buffers whole requests sits in front anyway (``deploy/nginx/netmap.conf``:
``client_header_timeout``, ``client_body_timeout``, ``proxy_request_buffering
on``). TLS connections are left to gthread unchanged (the head is encrypted;
terminate TLS at the proxy).
"""

from __future__ import annotations

import errno
import re
import selectors
import time
from collections import deque
from functools import partial
from typing import Any

import orjson
from gunicorn import util as gunicorn_util
from gunicorn.workers.gthread import TConn, ThreadWorker

from app.config import load_settings

# Larger heads go to the parser, which answers 431/400 by gunicorn's own limits.
MAX_BUFFERED_HEAD_BYTES = 65536
_END_OF_HEAD = b"\r\n\r\n"
_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length[ \t]*:[ \t]*(\d{1,19})[ \t]*(?=\r\n)", re.I)
_NOT_BUFFERED = re.compile(rb"\r\n(?:transfer-encoding|expect)[ \t]*:", re.I)
BODY_READ_BYTES = 256 * 1024


def buffered_body_length(head: bytes, limit: int) -> int | None:
    """How many body bytes to read on the event loop after ``head`` (the bytes up to and
    including the blank line), or None to hand the request to a thread now: no or a
    bad Content-Length, one over ``limit``, a chunked body, ``Expect: 100-continue``
    (the client waits for an answer before its body), or more than one length."""
    if limit <= 0 or _NOT_BUFFERED.search(head):
        return None
    lengths = _CONTENT_LENGTH.findall(head)
    if len(lengths) != 1:
        return None
    length = int(lengths[0])
    return length if 0 < length <= limit else None


# A request with a body at least this large (a scanner's batch: 500 observations are
# about 100 KB) closes its connection once answered (see the module doc).
LARGE_BODY_BYTES = 64 * 1024


def _content_length(req: Any) -> int:
    for name, value in req.headers:
        if name == "CONTENT-LENGTH":
            try:
                return int(value)
            except ValueError:
                return 0
    return 0


# What a request gunicorn could not read is answered with (its status decides the code).
PROTOCOL_ERROR_CODES = {
    400: "bad_request",
    403: "forbidden",
    414: "request_line_too_long",
    417: "expectation_failed",
    431: "request_headers_too_large",
    500: "internal_error",
    501: "not_implemented",
}


def write_json_error(sock: Any, status_int: int, reason: str, mesg: str) -> None:
    """gunicorn's answer to a request it could not read, as netmap's JSON error.

    gunicorn answers an over-long request line (414), too many or too large headers
    (431) or a malformed request (400) itself, before the application sees it, and
    its ``util.write_error`` writes an HTML page. netmap's clients read
    ``{"error": {"code", "message"}}`` from every other answer, so the worker writes
    that shape instead; the status, the log line and the closed connection stay
    gunicorn's."""
    body = orjson.dumps(
        {
            "error": {
                "code": PROTOCOL_ERROR_CODES.get(status_int, "bad_request"),
                "message": mesg or reason,
            }
        }
    )
    head = (
        f"HTTP/1.1 {status_int} {reason}\r\n"
        "Connection: close\r\n"
        "Content-Type: application/json\r\n"
        "X-Content-Type-Options: nosniff\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    gunicorn_util.write_nonblock(sock, head.encode("latin-1") + body)


class HeadBufferingThreadWorker(ThreadWorker):
    """``gthread`` that dispatches a connection to a thread only once its head is in."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # gunicorn's one writer of those answers is this module function, called by
        # ``Worker.handle_error``; replacing it in the worker's own process is the only
        # way to change the page without copying gunicorn's status rules.
        gunicorn_util.write_error = write_json_error
        settings, _check = load_settings()
        self.header_timeout = settings.server.header_timeout_seconds
        self.body_timeout = settings.server.body_timeout_seconds
        self.body_buffer_max = settings.server.body_buffer_max_bytes
        # Connections whose head is being read, oldest deadline first (one timeout for all).
        self.reading_heads: deque[TConn] = deque()
        # Connections whose body is being read, oldest deadline first (one timeout for all).
        self.reading_bodies: deque[TConn] = deque()

    # -- new connections and kept-alive connections with a new request ---------------------

    def accept(self, listener: Any) -> None:
        if self.cfg.is_ssl:
            return super().accept(listener)
        try:
            client_sock, client_addr = listener.accept()
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        self.nr_conns += 1
        conn = TConn(self.cfg, client_sock, client_addr, listener.getsockname())  # non-blocking
        self._start_reading_head(conn)

    def on_client_socket_readable(self, conn: TConn, client: Any) -> None:
        if self.cfg.is_ssl:
            return super().on_client_socket_readable(conn, client)
        self.poller.unregister(client)
        self.keepalived_conns.remove(conn)
        self._start_reading_head(conn)
        self._on_head_readable(conn, client)

    def _start_reading_head(self, conn: TConn) -> None:
        conn.netmap_head = bytearray()
        conn.netmap_head_deadline = time.monotonic() + self.header_timeout
        self.reading_heads.append(conn)
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._on_head_readable, conn))

    def _on_head_readable(self, conn: TConn, _client: Any) -> None:
        try:
            data = conn.sock.recv(MAX_BUFFERED_HEAD_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop_head_reader(conn)
            return
        if not data:
            self._drop_head_reader(conn)
            return
        conn.netmap_head += data
        head = conn.netmap_head
        end = head.find(_END_OF_HEAD)
        if end >= 0:
            self._stop_reading_head(conn)
            body = buffered_body_length(bytes(head[: end + 4]), self.body_buffer_max)
            if body is not None and len(head) < end + 4 + body:
                self._start_reading_body(conn, end + 4 + body)
                return
            self.enqueue_req(conn)
        elif len(head) >= MAX_BUFFERED_HEAD_BYTES:
            self._stop_reading_head(conn)
            self.enqueue_req(conn)

    # -- bodies: read on the event loop too ---------------------------------------------------

    def _start_reading_body(self, conn: TConn, total: int) -> None:
        conn.netmap_total = total
        conn.netmap_body_deadline = time.monotonic() + self.body_timeout
        self.reading_bodies.append(conn)
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._on_body_readable, conn))

    def _on_body_readable(self, conn: TConn, _client: Any) -> None:
        missing = conn.netmap_total - len(conn.netmap_head)
        try:
            data = conn.sock.recv(min(BODY_READ_BYTES, max(missing, 1)))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop_body_reader(conn)
            return
        if not data:
            self._drop_body_reader(conn)
            return
        conn.netmap_head += data
        if len(conn.netmap_head) >= conn.netmap_total:
            self._stop_reading_body(conn)
            self.enqueue_req(conn)

    def _stop_reading_body(self, conn: TConn) -> None:
        try:
            self.poller.unregister(conn.sock)
        except (KeyError, ValueError, OSError):
            pass
        try:
            self.reading_bodies.remove(conn)
        except ValueError:
            pass

    def _drop_body_reader(self, conn: TConn) -> None:
        self._stop_reading_body(conn)
        self.nr_conns -= 1
        conn.close()

    def _stop_reading_head(self, conn: TConn) -> None:
        try:
            self.poller.unregister(conn.sock)
        except (KeyError, ValueError, OSError):
            pass
        try:
            self.reading_heads.remove(conn)
        except ValueError:
            pass

    def _drop_head_reader(self, conn: TConn) -> None:
        self._stop_reading_head(conn)
        self.nr_conns -= 1
        conn.close()

    # -- in the thread: large requests end their connection ---------------------------------

    def handle_request(self, req: Any, conn: TConn) -> Any:
        if _content_length(req) >= LARGE_BODY_BYTES:
            req.force_close()
        return super().handle_request(req, conn)

    # -- in the thread: give the buffered head to gunicorn's parser ------------------------

    def handle(self, conn: TConn) -> Any:
        head = getattr(conn, "netmap_head", None)
        if head:
            conn.netmap_head = None
            conn.data_ready = True
            conn.init()
            conn.parser.unreader.unread(bytes(head))
        return super().handle(conn)

    # -- deadlines (called by gthread's loop at least once a second) -----------------------

    def murder_pending(self) -> None:
        super().murder_pending()
        now = time.monotonic()
        while self.reading_heads and (
            not self.alive or self.reading_heads[0].netmap_head_deadline <= now
        ):
            self._drop_head_reader(self.reading_heads[0])
        while self.reading_bodies and (
            not self.alive or self.reading_bodies[0].netmap_body_deadline <= now
        ):
            self._drop_body_reader(self.reading_bodies[0])
