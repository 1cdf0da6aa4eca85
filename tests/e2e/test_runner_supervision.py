"""Runner supervision: a hung worker is killed and replaced; boot failures stop the runner."""

from __future__ import annotations

import signal
import sys
import time

import psutil
import pytest

from tests.support.processes import LoggedProcess, base_env, wait_for

pytestmark = pytest.mark.e2e


def start(tmp_path, mode: str, processes: int) -> LoggedProcess:
    env = base_env(RUNNER_FAULT_DIR=str(tmp_path))
    command = [sys.executable, "-m", "tests.support.runner_faults", mode, str(processes)]
    return LoggedProcess(command, env, tmp_path, mode)


def test_a_silent_worker_is_killed_and_replaced(tmp_path):
    runner = start(tmp_path, "hang", 1)
    try:
        hanging = wait_for(lambda: runner.events("FakeWorkerHanging"), 60, "the worker to hang")
        hung_pid = hanging[0]["pid"]
        hung = wait_for(lambda: runner.events("RunnerWorkerHung"), 30, "the hang to be noticed")
        assert hung[0]["worker_id"] == 0 and hung[0]["worker_pid"] == hung_pid
        assert hung[0]["silent_s"] >= 2.0 and hung[0]["booted"] is True
        wait_for(lambda: runner.events("FakeWorkerHealthy"), 30, "a healthy replacement")
        died = runner.events("RunnerWorkerDied")[0]
        assert died["exitcode"] == -signal.SIGKILL and died["hung"] is True
        assert runner.events("RunnerWorkerReplaced")[0]["worker_id"] == 0
        assert not psutil.pid_exists(hung_pid) or psutil.Process(hung_pid).status() == "zombie"
        # The replacement keeps beating: longer than worker_timeout passes without a new hang.
        time.sleep(3.0)
        assert len(runner.events("RunnerWorkerHung")) == 1
        runner.process.send_signal(signal.SIGTERM)
        assert runner.wait(timeout=30) == 0
        assert runner.events("RunnerStopped")[0]["killed_workers"] == 0
    finally:
        runner.stop()


def test_workers_failing_at_import_stop_the_runner_with_a_clear_error(tmp_path):
    runner = start(tmp_path, "import-error", 2)
    try:
        assert runner.wait(timeout=60) == 3
        failures = runner.events("RunnerWorkerBootFailed")
        assert [f["consecutive"] for f in failures] == [1, 2, 3]
        assert all(f["exitcode"] == 1 for f in failures)
        assert "ModuleNotFoundError" in runner.stderr()
        assert (
            "netmap runner: stopping: workers died while booting 3 times in a row"
            in runner.stderr()
        )
        assert runner.events("RunnerHalted")
    finally:
        runner.stop()
