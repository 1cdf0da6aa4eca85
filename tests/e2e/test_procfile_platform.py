"""The Procfile run as a platform runs it (issue 20): honcho, only the platform's variables.

A platform that runs Procfiles gives the app ``PORT``, ``DATABASE_URL`` (often in the
``postgres://`` form) and whatever the operator set (here ``NETMAP_SECRET_KEY``), runs
the ``release`` command once per deploy, then starts ``web`` and ``worker`` and sends
SIGTERM with a 30 s grace period on stop. The only extra variable here is
``NETMAP_SERVER_HOST=127.0.0.1``: a platform binds 0.0.0.0 (the unit tests check that
PORT alone does), but tests on this machine listen on the loopback only, and the
override also shows netmap's own setting winning over the platform default.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import requests

from tests.support.database import unique_name
from tests.support.processes import PROJECT_ROOT, LoggedProcess, free_port, wait_for
from tests.support.scanner_protocol import observation, upload_body

pytestmark = pytest.mark.e2e

GRACE_SECONDS = 30
BIN = Path(sys.executable).parent


def _honcho() -> str:
    found = shutil.which("honcho", path=str(BIN)) or shutil.which("honcho")
    if not found:
        pytest.fail("honcho is not installed: pip install -e '.[dev]'")
    return found


def _postgres_scheme(url: str) -> str:
    # The old scheme some platforms still hand out; netmap must normalise it.
    scheme, rest = url.split("://", 1)
    assert scheme.startswith("postgresql")
    return "postgres://" + rest


METRICS_TOKEN = "platform-metrics-token-0123456789"


def _platform_env(port: int, database_url: str) -> dict[str, str]:
    return {
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
        "PORT": str(port),
        "DATABASE_URL": database_url,
        "NETMAP_SECRET_KEY": "platform-secret-key-for-the-procfile-test-0123456789",
        "NETMAP_SERVER_HOST": "127.0.0.1",
        # The operator's scrape token: /metrics answers only with it (or an admin session).
        "NETMAP_METRICS_TOKEN": METRICS_TOKEN,
    }


def _run(args: list[str], env: dict[str, str], *, stdin: str | None = None, timeout: float = 120):
    return subprocess.run(
        args,
        env=env,
        cwd=PROJECT_ROOT,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _events(text: str, name: str) -> list[dict]:
    found = []
    for line in text.splitlines():
        start = line.find("{")
        if start < 0:
            continue
        try:
            event = json.loads(line[start:])
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("event") == name:
            found.append(event)
    return found


@pytest.fixture
def scratch_database(pg_server):
    name = unique_name("netmap_paas")
    url = pg_server.create_database(name)
    yield url
    pg_server.drop_database(name)


def test_procfile_release_web_and_worker_on_a_platform(tmp_path, scratch_database):
    port = free_port()
    env = _platform_env(port, _postgres_scheme(scratch_database))
    honcho = _honcho()

    # Before the release phase both processes refuse, naming the command to run.
    refused_web = _run([honcho, "start", "web"], env, timeout=90)
    assert "netmap db upgrade" in refused_web.stdout + refused_web.stderr, refused_web.stdout
    refused_worker = _run(["netmap", "runner"], env, timeout=90)
    assert refused_worker.returncode != 0
    assert "netmap db upgrade" in refused_worker.stderr

    release = _run([honcho, "start", "release"], env, timeout=180)
    assert release.returncode == 0, release.stdout[-3000:] + release.stderr[-3000:]
    again = _run(["netmap", "db", "upgrade"], env)  # idempotent: a second release is a no-op
    assert again.returncode == 0, again.stderr[-3000:]

    admin = _run(
        ["netmap", "users", "create", "operator", "--admin", "--password-stdin"],
        env,
        stdin="correct horse battery staple\n",
    )
    assert admin.returncode == 0, admin.stderr[-2000:]
    scanner = _run(["netmap", "scanners", "create", "platform-scanner"], env)
    assert scanner.returncode == 0, scanner.stderr[-2000:]
    token = json.loads(scanner.stdout)["token"]

    processes = LoggedProcess([honcho, "start", "web", "worker"], env, tmp_path, "honcho")
    base = f"http://127.0.0.1:{port}"
    try:

        def ready() -> bool:
            if processes.process.poll() is not None:
                raise AssertionError(processes.stdout()[-4000:])
            try:
                return requests.get(base + "/readyz", timeout=10).status_code == 200
            except requests.RequestException:  # not listening yet, or a worker still booting
                return False

        wait_for(ready, 120, "/readyz on $PORT")
        started = _events(processes.stdout(), "WebServerStarting")
        assert started, processes.stdout()[-3000:]
        assert started[0]["bind"] == f"127.0.0.1:{port}"
        assert started[0]["value_sources"]["server.port"] == "platform:PORT"
        assert started[0]["value_sources"]["database.url"] == "platform:DATABASE_URL"
        assert started[0]["value_sources"]["server.host"] == "environment:NETMAP_SERVER_HOST"

        def sources_of(process: str) -> list[dict]:
            events = _events(processes.stdout(), "ConfigSources")
            return [e for e in events if e.get("process") == process]

        for process in ("runner", "web"):
            (first, *_rest) = wait_for(lambda p=process: sources_of(p), 60, f"{process} sources")
            assert first["value_sources"]["database.url"] == "platform:DATABASE_URL"
        assert "s3cret" not in processes.stdout() and "postgres://" not in processes.stdout()

        browser = requests.Session()
        login = browser.post(
            base + "/api/auth/login",
            json={"username": "operator", "password": "correct horse battery staple"},
            timeout=10,
        )
        assert login.status_code == 200, login.text
        csrf = {"X-CSRF-Token": login.json()["csrf_token"]}
        task = browser.post(
            base + "/api/tasks",
            json={"name": "platform", "targets": ["192.0.2.7"], "ports": "443"},
            headers=csrf,
            timeout=10,
        )
        assert task.status_code == 201, task.text

        auth = {"Authorization": f"Bearer {token}"}
        claim = requests.post(base + "/api/scanner/claim", headers=auth, timeout=10)
        assert claim.status_code == 200, claim.text
        execution = claim.json()["execution"]
        body = upload_body(
            execution["claim_token"],
            0,
            [observation("192.0.2.7", 443, service={"name": "https", "product": "nginx"})],
            is_final=True,
        )
        upload = requests.post(
            base + f"/api/scanner/executions/{execution['id']}/uploads",
            json=body,
            headers=auth,
            timeout=30,
        )
        assert upload.status_code == 200, upload.text
        assert upload.json() == {"success": True, "saved": 1}

        def published() -> list:
            response = browser.get(base + "/api/assets", params={"ip": "192.0.2.7"}, timeout=10)
            assert response.status_code == 200, response.text
            return response.json()["items"]

        assets = wait_for(published, 60, "the worker to publish the projection")
        assert [(a["ip"], a["port"], a["last_execution_id"]) for a in assets] == [
            ("192.0.2.7", 443, execution["id"])
        ]

        # Several workers answer these; /metrics (from any one worker) counts them all.
        assert started[0]["workers"] >= 2 and started[0]["metrics_dir_created"] is True
        for _ in range(12):
            assert requests.get(base + "/healthz", timeout=10).status_code == 200
        metrics = requests.get(
            base + "/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=10
        )
        assert metrics.status_code == 200
        assert (
            'netmap_http_request_duration_seconds_count{method="GET",route="/healthz",'
            'status="2xx"} 12.0'
        ) in metrics.text

        children = psutil.Process(processes.pid).children(recursive=True)
        assert children
        processes.process.send_signal(signal.SIGTERM)
        try:
            # The platform's grace period: after it, a platform sends SIGKILL.
            processes.wait(timeout=GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            pytest.fail("web and worker did not stop within 30 s:\n" + processes.stdout()[-3000:])
        _gone, alive = psutil.wait_procs(children, timeout=5)
        assert not alive, [p.pid for p in alive]
        output = processes.stdout()
        assert "web.1" in output and "worker.1" in output
        assert "SIGKILL" not in output, output[-3000:]
    finally:
        processes.stop()
