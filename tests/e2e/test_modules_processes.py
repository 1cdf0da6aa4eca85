"""Real gunicorn web processes and a real runner with renderer worker processes.

Two independent web servers on one database converge on a revision published
through the other; SIGTERM to web and runner leaves no renderer worker behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import requests

from app.db import transaction
from app.identity.users import create_user
from app.migrations import PROJECT_ROOT
from tests.support.processes import free_port
from tests.support.settings import RENDERER_RELEASES, TEST_SECRET_KEY
from tests.support.waiting import process_gone, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
WORKER_NAME = "nm-report-render-worker"
PASSWORD = "correct horse battery staple"


def write_config(tmp_path: Path, releases: Path) -> Path:
    config = tmp_path / "netmap.toml"
    config.write_text(
        "[server]\nweb_workers = 1\nweb_threads = 4\n"
        f'[report_renderer]\nreleases_directory = "{releases}"\nrefresh_seconds = 1.0\n'
        "[runner]\nprocesses = 1\nshutdown_timeout_seconds = 10\n"
    )
    return config


def environment(database_url: str, config: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        NETMAP_DATABASE_URL=database_url,
        NETMAP_SECRET_KEY=TEST_SECRET_KEY,
        NETMAP_CONFIG=str(config),
        NETMAP_LOG_LEVEL="WARNING",
    )
    env.update(extra)
    return env


def renderer_workers(root: psutil.Process) -> list[psutil.Process]:
    found = []
    for child in root.children(recursive=True):
        try:
            if any(WORKER_NAME in part for part in child.cmdline()):
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found


def all_renderer_workers_with(release_dir: Path) -> list[int]:
    pids = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info.get("cmdline") or []
        if any(str(release_dir) in part and WORKER_NAME in part for part in cmdline):
            pids.append(process.pid)
    return pids


class WebServer:
    def __init__(self, env: dict[str, str], log: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**env, "NETMAP_BIND": f"127.0.0.1:{self.port}"}
        self.log = open(log, "wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", "python:app.gunicorn_conf", "wsgi:app"],
            cwd=PROJECT_ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        wait_until(self._ready, timeout=60, interval=0.1)
        self.session = requests.Session()

    def _ready(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"gunicorn exited with {self.process.returncode}")
        try:
            return requests.get(self.url + "/healthz", timeout=1).status_code == 200
        except requests.RequestException:
            return False

    def login(self, username: str) -> None:
        response = self.session.post(
            self.url + "/api/auth/login", json={"username": username, "password": PASSWORD}
        )
        assert response.status_code == 200, response.text
        self.session.headers["X-CSRF-Token"] = response.json()["csrf_token"]

    def status(self) -> dict:
        response = self.session.get(self.url + "/api/modules/report-render", timeout=5)
        assert response.status_code == 200, response.text
        return response.json()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


@pytest.fixture
def admin_name(database_url, engine) -> str:
    with transaction() as conn:
        create_user(conn, "e2e-admin", PASSWORD, is_admin=True)
    return "e2e-admin"


def test_two_web_processes_converge_and_leave_no_workers(
    database_url, admin_name, renderer_releases, tmp_path
):
    env = environment(
        database_url, write_config(tmp_path, renderer_releases), NETMAP_LOG_LEVEL="INFO"
    )
    first = WebServer(env, tmp_path / "web1.log")
    second = WebServer(env, tmp_path / "web2.log")
    try:
        first.login(admin_name)
        second.login(admin_name)
        assert first.status()["converged"] and second.status()["converged"]
        response = first.session.post(
            first.url + "/api/modules/report-render",
            json={
                "expectedRevision": first.status()["desired"]["revision"],
                "releaseId": RENDERER_RELEASES[0],
                "changeReason": "e2e publish through the first server",
            },
        )
        assert response.status_code == 200, response.text
        revision = response.json()["revision"]

        def second_converged():
            status = second.status()
            return (
                status["converged"]
                and status["applied"]["revision"] == revision
                and status["applied"]["release_id"] == RENDERER_RELEASES[0]
            )

        wait_until(second_converged, timeout=10, interval=0.2)  # MOD-3: within 10 s
        for server in (first, second):
            workers = renderer_workers(psutil.Process(server.process.pid))
            assert len(workers) == 1, workers
        pids = [
            w.pid for s in (first, second) for w in renderer_workers(psutil.Process(s.process.pid))
        ]
    finally:
        first.stop()
        second.stop()
    for pid in pids:
        assert process_gone(pid)
    assert not all_renderer_workers_with(renderer_releases / RENDERER_RELEASES[0])
    for name in ("web1.log", "web2.log"):  # drained by the worker_exit hook, not just orphaned
        assert '"ReportRendererClosed"' in (tmp_path / name).read_text()


def test_runner_applies_the_selection_and_leaves_no_workers_on_shutdown(
    database_url, admin_name, renderer_releases, tmp_path
):
    from app.modules import selection

    with transaction() as conn:
        selection.ensure_default_selection(conn)
        selection.publish_selection(
            conn,
            expected_revision=1,
            release_id=RENDERER_RELEASES[1],
            change_reason="runner e2e",
            actor_user_id=None,
        )
    env = environment(
        database_url, write_config(tmp_path, renderer_releases), NETMAP_LOG_LEVEL="INFO"
    )
    log = open(tmp_path / "runner.log", "wb")
    runner = subprocess.Popen(
        [sys.executable, "-m", "app", "runner", "--processes", "2"],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        root = psutil.Process(runner.pid)
        workers = wait_until(lambda: len(renderer_workers(root)) == 2 and renderer_workers(root))
        pids = [w.pid for w in workers]
        for worker in workers:
            assert any(RENDERER_RELEASES[1] in part for part in worker.cmdline())
        time.sleep(0.2)
        runner.send_signal(signal.SIGTERM)
        assert runner.wait(timeout=60) == 0
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
        log.close()
    for pid in pids:
        assert process_gone(pid)
    assert not all_renderer_workers_with(renderer_releases / RENDERER_RELEASES[1])
    text = (tmp_path / "runner.log").read_text()
    assert text.count('"ReportRendererClosed"') == 2  # each runner worker drained its modules
