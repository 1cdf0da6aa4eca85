"""`netmap up` as a real process: embedded PostgreSQL, migrations, gunicorn and runner."""

from __future__ import annotations

import json
import re
import signal
import subprocess

import pytest
import requests

from app import embedded
from tests.support.processes import (
    PROJECT_ROOT,
    LoggedProcess,
    base_env,
    free_port,
    netmap_command,
    wait_for,
)

pytestmark = pytest.mark.e2e


def test_up_serves_migrates_and_stops_cleanly(tmp_path):
    port = free_port()
    data_dir = tmp_path / "var"
    env = base_env(NETMAP_RUNNER_PROCESSES="1")
    up = LoggedProcess(
        netmap_command("--data-dir", str(data_dir), "up", "--port", str(port)),
        env,
        tmp_path,
        "up",
    )
    try:
        url = wait_for(
            lambda: re.search(r"netmap is up: (\S+)", up.stdout()) or up.process.poll() is not None,
            90,
            "the URL line",
        )
        assert up.process.poll() is None, up.stderr()[-3000:]
        base = url.group(1)
        assert base == f"http://127.0.0.1:{port}"
        password = re.search(r"password: (\S+)", up.stdout()).group(1)
        assert requests.get(base + "/readyz", timeout=5).status_code == 200

        browser = requests.Session()
        login = browser.post(
            base + "/api/auth/login", json={"username": "admin", "password": password}, timeout=5
        )
        assert login.status_code == 200, login.text
        csrf = login.json()["csrf_token"]
        task = browser.post(
            base + "/api/tasks",
            json={"name": "e2e", "targets": ["192.0.2.1"], "ports": "80"},
            headers={"X-CSRF-Token": csrf},
            timeout=5,
        )
        assert task.status_code == 201, task.text

        # The CLI attaches to the running embedded server.
        created = subprocess.run(
            netmap_command("--data-dir", str(data_dir), "scanners", "create", "e2e-scanner"),
            capture_output=True,
            text=True,
            env=env,
            cwd=PROJECT_ROOT,
            timeout=60,
        )
        assert created.returncode == 0, created.stderr
        token = json.loads(created.stdout)["token"]
        claim = requests.post(
            base + "/api/scanner/claim", headers={"Authorization": f"Bearer {token}"}, timeout=5
        )
        assert claim.status_code == 200, claim.text
        assert claim.json()["execution"]["task_id"] == task.json()["task"]["id"]
        assert embedded.is_running(data_dir / "pgdata")
        wait_for(lambda: up.events("RunnerWorkerStarted"), 30, "the runner worker")

        up.process.send_signal(signal.SIGTERM)
        assert up.wait(timeout=60) == 0, up.stderr()[-3000:]
    finally:
        up.stop()
    assert not embedded.is_running(data_dir / "pgdata")
    # A second start reuses the data: no new admin password.
    again = LoggedProcess(
        netmap_command(
            "--data-dir", str(data_dir), "up", "--port", str(free_port()), "--no-runner"
        ),
        env,
        tmp_path,
        "up2",
    )
    try:
        wait_for(lambda: "netmap is up" in again.stdout(), 90, "the second start")
        assert "password" not in again.stdout()
        again.process.send_signal(signal.SIGINT)
        assert again.wait(timeout=60) == 0
    finally:
        again.stop()
    assert not embedded.is_running(data_dir / "pgdata")


def _runner_child(up: LoggedProcess):
    import psutil

    for child in psutil.Process(up.pid).children():
        try:
            if child.cmdline()[-1:] == ["runner"]:
                return child
        except psutil.NoSuchProcess:
            continue
    return None


def test_up_restarts_a_killed_runner_and_reports_it(tmp_path):
    """`kill -9` of the runner leaves the web server and database up; the runner comes back.

    Also the `up --data-dir DIR` form (the option given to `up` itself)."""
    import os

    port = free_port()
    data_dir = tmp_path / "var"
    env = base_env(NETMAP_RUNNER_PROCESSES="1", NETMAP_RUNNER_WORKER_RESTART_BACKOFF_SECONDS="0.5")
    up = LoggedProcess(
        netmap_command("up", "--data-dir", str(data_dir), "--port", str(port)),
        env,
        tmp_path,
        "up",
    )
    try:
        wait_for(
            lambda: "netmap is up" in up.stdout() or up.process.poll() is not None,
            90,
            "the URL line",
        )
        assert up.process.poll() is None, up.stderr()[-3000:]
        assert (data_dir / "pgdata").is_dir()
        base = f"http://127.0.0.1:{port}"
        first = wait_for(lambda: _runner_child(up), 30, "the runner process")
        wait_for(lambda: up.events("RunnerWorkerStarted"), 30, "the runner worker")
        os.kill(first.pid, signal.SIGKILL)
        restarted = wait_for(lambda: up.events("RunnerRestarted"), 60, "RunnerRestarted")
        assert restarted[0]["exit_code"] == -signal.SIGKILL
        assert restarted[0]["restarts"] == 1 and restarted[0]["backoff_seconds"] > 0
        assert up.process.poll() is None, up.stderr()[-3000:]
        assert requests.get(base + "/healthz", timeout=5).status_code == 200
        second = wait_for(
            lambda: (child := _runner_child(up)) is not None and child.pid != first.pid and child,
            60,
            "a new runner process",
        )
        assert second.is_running()
        assert "runner" in up.stderr() and "restart" in up.stderr()
        assert embedded.is_running(data_dir / "pgdata")
        up.process.send_signal(signal.SIGTERM)
        assert up.wait(timeout=60) == 0, up.stderr()[-3000:]
    finally:
        up.stop()
    assert not embedded.is_running(data_dir / "pgdata")
