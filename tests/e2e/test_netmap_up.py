"""`netmap up` as a real process: embedded PostgreSQL, migrations, gunicorn and runner."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time

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

# Ctrl-C to exit on a busy CI host: the web server and runner stop at once, then the
# embedded PostgreSQL (fast shutdown).
STOP_SECONDS = 15.0


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
        # Not a terminal: JSON lines only, and each configuration warning once (from `up`).
        lines = [line for line in up.stderr().splitlines() if line.strip()]
        assert all(line.startswith("{") for line in lines), lines[:5]
        warnings = [event["problem"] for event in up.events("ConfigWarning")]
        assert warnings and len(warnings) == len(set(warnings)), warnings
        assert {event["process"] for event in up.events("ConfigWarning")} == {"up"}
        assert (
            requests.get(base + "/", allow_redirects=False, timeout=5).headers["Location"]
            == "/console/"
        )

        up.process.send_signal(signal.SIGTERM)
        assert up.wait(timeout=60) == 0, up.stderr()[-3000:]
    finally:
        up.stop()
    assert not embedded.is_running(data_dir / "pgdata")
    # A second start reuses the data: no new admin password. It runs on a pipe in text
    # mode and is stopped as a terminal's Ctrl-C stops it.
    _second_start_piped_then_ctrl_c(data_dir, tmp_path, env)


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
    up = _started_up(tmp_path, data_dir, port, env)
    try:
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


def _second_start_piped_then_ctrl_c(data_dir, tmp_path, env):
    """`netmap up --log-format text | cat`, then Ctrl-C as a terminal sends it: SIGINT to
    the whole foreground process group (the shell, netmap and the pipe's reader)."""
    import os

    port = free_port()
    out = tmp_path / "piped.out"
    err = tmp_path / "piped.err"
    command = " ".join(
        netmap_command(
            "--data-dir", str(data_dir), "up", "--port", str(port), "--log-format", "text"
        )
    )
    with open(err, "wb") as err_file:
        shell = subprocess.Popen(
            ["bash", "-c", f"{command} | cat > {out}"],
            env=env,
            cwd=PROJECT_ROOT,
            stderr=err_file,
            start_new_session=True,
        )
        try:
            wait_for(
                lambda: "RunnerWorkerStarted" in err.read_text() or shell.poll() is not None,
                120,
                "the runner worker",
            )
            assert shell.poll() is None, err.read_text()[-3000:]
            banner = wait_for(lambda: "stop:" in out.read_text() and out.read_text(), 30, "banner")
            assert f"netmap is up: http://127.0.0.1:{port}" in banner
            assert "password" not in banner and "Ctrl-C" in banner
            text = err.read_text()
            assert not any(line.startswith("{") for line in text.splitlines()), text[:2000]
            assert " info    RunnerStarted" in text
            for line in text.splitlines():
                if line.startswith("config warning:"):
                    assert text.count(line) == 1, line  # each warning once
            os.killpg(shell.pid, signal.SIGINT)
            # The pipeline's status is the reader's (killed by SIGINT, as tee would be);
            # netmap's own exit code is in its last event below. The shell waits for
            # every member of the pipeline, netmap included: it stops in seconds (it took
            # 28 s when the children got the terminal's SIGINT and netmap's SIGTERM too).
            interrupted = time.monotonic()
            shell.wait(timeout=90)
            stopping = time.monotonic() - interrupted
            assert stopping < STOP_SECONDS, (stopping, err.read_text()[-3000:])
        finally:
            if shell.poll() is None:
                os.killpg(shell.pid, signal.SIGKILL)
                shell.wait(timeout=10)
    text = err.read_text()
    assert "RunnerShutdownTimeout" not in text, text[-3000:]
    assert "RunnerStopped killed_workers=0" in text
    assert "NetmapDown exit_code=0" in text
    assert not embedded.is_running(data_dir / "pgdata")


def test_a_second_up_on_the_same_data_or_port_is_refused_and_a_dead_database_stops_up(tmp_path):
    """Two `netmap up` on one data directory would share its metrics directory, control
    socket and database (the second emptied the first's metrics and stopped its database
    on exit): the second is refused at once. A port something else listens on is refused
    before any URL is printed (gunicorn's retries let the other server answer /readyz, so
    `up` announced someone else's server). And when the embedded PostgreSQL dies, `up`
    says so and stops the stack with exit 1 instead of serving 503 forever."""
    import os

    port = free_port()
    data_dir = tmp_path / "var"
    env = base_env(NETMAP_RUNNER_PROCESSES="1")
    up = _started_up(tmp_path, data_dir, port, env)
    try:
        base = f"http://127.0.0.1:{port}"
        requests.get(base + "/healthz", timeout=5)
        metrics_before = sorted(os.listdir(data_dir / "run" / "prometheus"))
        assert metrics_before

        for args, said in (
            # Same data directory, another port: the holder is named.
            (("--data-dir", str(data_dir), "up", "--port", str(free_port())), f"(pid {up.pid})"),
            # Another data directory, the same port.
            (("--data-dir", str(tmp_path / "other"), "up", "--port", str(port)), "in use"),
        ):
            second = subprocess.run(
                netmap_command(*args),
                env=env,
                cwd=PROJECT_ROOT,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert second.returncode == 1, (args, second.stdout, second.stderr[-2000:])
            assert said in second.stderr and "Traceback" not in second.stderr, second.stderr
            assert "netmap is up" not in second.stdout
        # The first one is untouched: its metrics directory kept, still ready.
        assert set(metrics_before) <= set(os.listdir(data_dir / "run" / "prometheus"))
        assert requests.get(base + "/readyz", timeout=5).status_code == 200
        assert not (tmp_path / "other" / "pgdata").exists()

        postmaster = int((data_dir / "pgdata" / "postmaster.pid").read_text().split()[0])
        os.kill(postmaster, signal.SIGINT)  # PostgreSQL's fast shutdown
        assert up.wait(timeout=90) == 1, up.stderr()[-3000:]
        assert "embedded PostgreSQL stopped" in up.stderr()
    finally:
        up.stop()
    assert not embedded.is_running(data_dir / "pgdata")


def test_up_killed_with_sigkill_takes_its_children_along_and_the_next_up_adopts_its_database(
    tmp_path,
):
    """`kill -9` of `netmap up` left the web server and runner serving as orphans (the next
    `up` found its port taken) and the embedded PostgreSQL running, which the next `up`
    then left running too. Now the kernel stops the children with it, and the next `up`,
    holding the data directory, adopts the database and stops it on exit."""
    import os

    import psutil

    port = free_port()
    data_dir = tmp_path / "var"
    env = base_env(NETMAP_RUNNER_PROCESSES="1")
    up = _started_up(tmp_path, data_dir, port, env)
    try:
        children = psutil.Process(up.pid).children()
        assert len(children) == 2, children  # gunicorn and the runner
        os.kill(up.pid, signal.SIGKILL)
        up.wait(timeout=30)
        _gone, alive = psutil.wait_procs(children, timeout=60)
        assert alive == [], alive
        assert embedded.is_running(data_dir / "pgdata")  # pg_ctl's server is its own
    finally:
        up.stop()

    again = _started_up(tmp_path, data_dir, port, env, "again")
    try:
        assert again.events("EmbeddedPostgresAdopted")
        again.process.send_signal(signal.SIGTERM)
        assert again.wait(timeout=60) == 0, again.stderr()[-3000:]
    finally:
        again.stop()
    assert not embedded.is_running(data_dir / "pgdata")


def _started_up(tmp_path, data_dir, port: int, env, name: str = "up") -> LoggedProcess:
    """`netmap up --data-dir DATA_DIR --port PORT`, once it has printed its URL."""
    up = LoggedProcess(
        netmap_command("up", "--data-dir", str(data_dir), "--port", str(port)), env, tmp_path, name
    )
    try:
        wait_for(
            lambda: "netmap is up" in up.stdout() or up.process.poll() is not None,
            90,
            "the URL line",
        )
        assert up.process.poll() is None, up.stderr()[-3000:]
    except BaseException:
        up.stop()
        raise
    return up
