"""The web tier as a real gunicorn: slow clients, control sockets, shared login limits.

Everything listens on 127.0.0.1 with free ports; every loop is bounded.
"""

from __future__ import annotations

import json
import shutil
import socket
import stat
import time

import pytest
import requests

from app.gunicorn_worker import LARGE_BODY_BYTES
from tests.support.scanner_protocol import make_task, observation, upload_body
from tests.support.sql import scalar
from tests.support.web_server import GunicornServer, short_directory

pytestmark = pytest.mark.e2e


@pytest.fixture
def short_dir():
    directory = short_directory("nm-web-")
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def _slow_connection(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    return sock


def test_gunicorn_stays_responsive_with_32_slow_connections(database_url, short_dir):
    # Production defaults for workers and threads (2 x 4); a long header timeout so the
    # slow connections stay open for the whole test.
    server = GunicornServer(
        database_url,
        short_dir / "var",
        short_dir / "gunicorn.log",
        NETMAP_SERVER_HEADER_TIMEOUT_SECONDS="60",
    )
    slow: list[socket.socket] = []
    try:
        slow = [_slow_connection(server.port) for _ in range(32)]
        kept_alive = requests.Session()
        for round_number in range(4):  # four header lines, two seconds apart
            time.sleep(2)
            for sock in slow:
                sock.sendall(b"X-Slow-%d: still typing\r\n" % round_number)
            assert requests.get(server.url + "/healthz", timeout=10).status_code == 200
            assert kept_alive.get(server.url + "/healthz", timeout=10).status_code == 200
        # The slow clients are still being served once they finish their request.
        for sock in slow[:4]:
            sock.sendall(b"\r\n")
            sock.settimeout(10)
            assert sock.recv(64).startswith(b"HTTP/1.1 200")
    finally:
        for sock in slow:
            sock.close()
        server.stop()


def test_a_request_head_not_finished_in_time_is_closed(database_url, short_dir):
    server = GunicornServer(
        database_url,
        short_dir / "var",
        short_dir / "gunicorn.log",
        NETMAP_SERVER_HEADER_TIMEOUT_SECONDS="1",
    )
    try:
        sock = _slow_connection(server.port)
        sock.settimeout(30)
        try:
            assert sock.recv(64) == b""
        except ConnectionResetError:
            pass
        finally:
            sock.close()
        assert requests.get(server.url + "/healthz", timeout=10).status_code == 200
    finally:
        server.stop()


def test_two_instances_keep_their_control_sockets_under_their_data_directories(
    database_url, short_dir
):
    home = short_dir / "home"
    home.mkdir()
    first = GunicornServer(database_url, short_dir / "a", short_dir / "a.log", HOME=str(home))
    try:
        second = GunicornServer(database_url, short_dir / "b", short_dir / "b.log", HOME=str(home))
        try:
            for server in (first, second):
                control = server.data_dir / "run" / "gunicorn.ctl"
                assert control.exists(), server.log_path.read_text()[-2000:]
                assert stat.S_ISSOCK(control.stat().st_mode)
            assert not (home / ".gunicorn").exists()
        finally:
            second.stop()
    finally:
        first.stop()


def test_login_limits_hold_across_two_gunicorn_instances(database_url, engine, short_dir):
    limits = {
        "NETMAP_SECURITY_LOGIN_RATE_LIMIT": "3/hour",
        "NETMAP_SECURITY_LOGIN_USERNAME_RATE_LIMIT": "100/minute",
    }
    first = GunicornServer(database_url, short_dir / "a", short_dir / "a.log", **limits)
    try:
        second = GunicornServer(database_url, short_dir / "b", short_dir / "b.log", **limits)
        try:
            statuses = [
                requests.post(
                    server.url + "/api/auth/login",
                    json={"username": "nobody", "password": "wrong password"},
                    timeout=10,
                ).status_code
                for server in (first, second, first, second)
            ]
            assert statuses == [401, 401, 401, 429]
        finally:
            second.stop()
    finally:
        first.stop()


def test_the_nginx_example_is_a_valid_configuration(tmp_path):
    """`nginx -t` accepts deploy/nginx/netmap.conf (with a throwaway certificate)."""
    import subprocess

    from tests.support.processes import PROJECT_ROOT

    if not (shutil.which("nginx") and shutil.which("openssl")):
        pytest.skip("nginx or openssl is not installed")
    certificates = tmp_path / "ssl"
    certificates.mkdir()
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=netmap.test", "-keyout", str(certificates / "privkey.pem")),
            *("-out", str(certificates / "fullchain.pem")),
        ],
        check=True,
        capture_output=True,
    )
    example = (PROJECT_ROOT / "deploy" / "nginx" / "netmap.conf").read_text()
    (tmp_path / "netmap.conf").write_text(example.replace("/etc/ssl/netmap", str(certificates)))
    (tmp_path / "nginx.conf").write_text(
        f"pid {tmp_path}/nginx.pid;\nerror_log {tmp_path}/error.log;\nevents {{}}\n"
        f"http {{ include {tmp_path}/netmap.conf; }}\n"
    )
    checked = subprocess.run(
        ["nginx", "-t", "-c", str(tmp_path / "nginx.conf"), "-p", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert checked.returncode == 0, checked.stderr


def _exchange(sock: socket.socket, request: bytes) -> bytes:
    """Send ``request`` and read one whole response (head and ``Content-Length`` body)."""
    sock.sendall(request)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before a response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "connection closed inside a response body"
        body += chunk
    return head


def _post(size: int) -> bytes:
    body = b'{"padding": "' + b"x" * size + b'"}'
    return (
        b"POST /api/scanner/claim HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body)
    ) + body


def test_a_large_request_ends_its_connection_and_a_small_one_keeps_it(database_url, short_dir):
    # A scanner's batch must not pin the scanner's connection to one worker (see
    # app.gunicorn_worker): its response closes the connection; small requests keep it.
    server = GunicornServer(database_url, short_dir / "var", short_dir / "gunicorn.log")
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            for _ in range(3):  # the same connection serves request after request
                head = _exchange(sock, _post(100))
                assert head.startswith(b"HTTP/1.1 401")
                assert b"connection: close" not in head.lower()
            head = _exchange(sock, _post(LARGE_BODY_BYTES))
            assert head.startswith(b"HTTP/1.1 401")
            assert b"connection: close" in head.lower()
            assert sock.recv(1) == b""  # closed by the server once answered
    finally:
        server.stop()


def _slow_body(port: int, length: int = 100_000) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(
        b"POST /api/scanner/claim HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % length
    )
    return sock


def test_gunicorn_stays_responsive_with_32_slow_bodies(database_url, short_dir, api):
    """Complete heads, bodies trickling: the bodies are buffered by the event loop, so
    no thread waits for them; /healthz is answered and a scanner claims its execution
    and uploads its results meanwhile."""
    user, scanner = api.user(), api.scanner()
    task = make_task(user, targets=("127.0.0.0/24",), ports="22,443")
    # A batch above LARGE_BODY_BYTES, as a scanner sends it: read by the event loop too.
    batch = [
        observation(f"127.0.0.{host}", port, service={"name": "ssh", "product": "OpenSSH"})
        for host in range(1, 201)
        for port in (22, 443)
    ]
    server = GunicornServer(
        database_url,
        short_dir / "var",
        short_dir / "gunicorn.log",
        NETMAP_SERVER_BODY_TIMEOUT_SECONDS="60",
    )
    agent = requests.Session()
    agent.headers["Authorization"] = f"Bearer {scanner.token}"
    slow: list[socket.socket] = []
    try:
        slow = [_slow_body(server.port) for _ in range(32)]

        def trickle() -> None:  # a few body bytes every two seconds, then a health check
            time.sleep(2)
            for sock in slow:
                sock.sendall(b" " * 10)
            assert requests.get(server.url + "/healthz", timeout=10).status_code == 200

        trickle()
        claimed = agent.post(server.url + "/api/scanner/claim", timeout=30)
        assert claimed.status_code == 200, claimed.text
        execution = claimed.json()["execution"]
        assert execution["task_id"] == task["id"]
        uploads = f"{server.url}/api/scanner/executions/{execution['id']}/uploads"

        trickle()
        body = upload_body(execution["claim_token"], 0, batch)
        assert len(json.dumps(body)) > LARGE_BODY_BYTES
        first = agent.post(uploads, json=body, timeout=30)
        assert first.status_code == 200, first.text
        assert first.json() == {"success": True, "saved": len(batch)}

        trickle()
        last = [observation("127.0.0.201", 22)]
        final = agent.post(
            uploads, json=upload_body(execution["claim_token"], 1, last, is_final=True), timeout=30
        )
        assert final.status_code == 200, final.text
        assert final.json() == {"success": True, "saved": 1}
        assert (
            scalar("SELECT status FROM scan_executions WHERE id = :id", id=execution["id"])
            == "succeeded"
        )

        trickle()
        # A slow client that finishes its body is served: it was still waiting all along.
        sock = slow[0]
        sock.sendall(b" " * (100_000 - 40))
        sock.settimeout(10)
        assert sock.recv(64).startswith(b"HTTP/1.1 401")
    finally:
        agent.close()
        for sock in slow:
            sock.close()
        server.stop()


def test_a_request_body_not_finished_in_time_is_closed(database_url, short_dir):
    server = GunicornServer(
        database_url,
        short_dir / "var",
        short_dir / "gunicorn.log",
        NETMAP_SERVER_BODY_TIMEOUT_SECONDS="1",
    )
    try:
        sock = _slow_body(server.port)
        sock.sendall(b"{")
        sock.settimeout(30)
        try:
            assert sock.recv(64) == b""
        except ConnectionResetError:
            pass
        finally:
            sock.close()
        assert requests.get(server.url + "/healthz", timeout=10).status_code == 200
    finally:
        server.stop()


def _raw_answer(port: int, request: bytes) -> tuple[bytes, dict]:
    """Send ``request`` on a new connection and read until the server closes it."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return head, json.loads(body)


def test_a_request_gunicorn_cannot_read_is_answered_with_a_json_error(database_url, short_dir):
    # gunicorn refuses these before the app runs; its own answer was an HTML page.
    server = GunicornServer(database_url, short_dir / "var", short_dir / "gunicorn.log")
    try:
        long_line = b"GET /api/assets?q=" + b"a" * 5000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"
        head, body = _raw_answer(server.port, long_line)
        assert head.startswith(b"HTTP/1.1 414 ")
        assert b"content-type: application/json" in head.lower()
        assert body["error"]["code"] == "request_line_too_long"
        assert "too large" in body["error"]["message"].lower()

        many = b"".join(b"X-H%d: v\r\n" % n for n in range(150))
        head, body = _raw_answer(
            server.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + many + b"\r\n"
        )
        assert head.startswith(b"HTTP/1.1 431 ")
        assert body["error"]["code"] == "request_headers_too_large"

        head, body = _raw_answer(server.port, b"GET /healthz HTTP/1.1\r\nBad\x01Name: v\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400 ")
        assert body["error"]["code"] == "bad_request"
        assert body["error"]["message"]

        # The server goes on serving.
        assert requests.get(f"http://127.0.0.1:{server.port}/healthz", timeout=10).ok
    finally:
        server.stop()
