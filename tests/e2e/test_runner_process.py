"""`netmap runner` as a real process: workers, replacement, recovery job, clean shutdown."""

from __future__ import annotations

import os
import signal

import psutil
import pytest
import sqlalchemy as sa

from app.db import transaction
from tests.support.processes import (
    LoggedProcess,
    base_env,
    netmap_command,
    wait_for,
    worker_pids,
)

pytestmark = pytest.mark.e2e


def start_runner(database_url, tmp_path, name="runner", processes=2, **env):
    settings_env = base_env(
        NETMAP_DATABASE_URL=database_url,
        NETMAP_RUNNER_EXECUTION_RECOVERY_INTERVAL_SECONDS="0.5",
        NETMAP_RUNNER_IDLE_BACKOFF_MAX_SECONDS="0.2",
        NETMAP_RUNNER_WORKER_RESTART_BACKOFF_SECONDS="0.2",
        NETMAP_SCAN_RETRY_BACKOFF_SECONDS="0",
        **env,
    )
    return LoggedProcess(
        netmap_command("runner", "--processes", str(processes)), settings_env, tmp_path, name
    )


def test_runner_starts_idles_and_stops_on_sigterm(database_url, tmp_path, engine):
    runner = start_runner(database_url, tmp_path)
    try:
        wait_for(lambda: len(runner.events("RunnerWorkerStarted")) == 2, 60, "two workers")
        children = psutil.Process(runner.pid).children(recursive=True)
        runner.process.send_signal(signal.SIGTERM)
        assert runner.wait(timeout=30) == 0
        assert len(runner.events("RunnerWorkerStopped")) == 2
        assert runner.events("RunnerStopped")[0]["killed_workers"] == 0
        _gone, alive = psutil.wait_procs(children, timeout=10)
        assert alive == []
    finally:
        runner.stop()


def test_runner_stops_on_sigint(database_url, tmp_path, engine):
    runner = start_runner(database_url, tmp_path, processes=1)
    try:
        wait_for(lambda: runner.events("RunnerWorkerStarted"), 60, "a worker")
        runner.process.send_signal(signal.SIGINT)
        assert runner.wait(timeout=30) == 0
    finally:
        runner.stop()


def test_a_killed_worker_is_replaced(database_url, tmp_path, engine):
    runner = start_runner(database_url, tmp_path)
    try:
        wait_for(lambda: len(runner.events("RunnerWorkerStarted")) == 2, 60, "two workers")
        before = worker_pids(runner)
        victim = sorted(before)[0]
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda: runner.events("RunnerWorkerReplaced"), 30, "a replacement")
        died = runner.events("RunnerWorkerDied")[0]
        assert died["exitcode"] == -signal.SIGKILL
        after = wait_for(
            lambda: (p := worker_pids(runner)) and len(p) == 2 and p, 30, "two workers again"
        )
        assert victim not in after
        runner.process.send_signal(signal.SIGTERM)
        assert runner.wait(timeout=30) == 0
    finally:
        runner.stop()


def test_the_runner_recovers_expired_scanner_leases(database_url, tmp_path, api):
    user, scanner = api.user(), api.scanner()
    user.post("/api/tasks", json={"name": "r", "targets": ["192.0.2.1"], "ports": "80"})
    claimed = scanner.claim().get_json()["execution"]
    with transaction() as conn:
        conn.execute(
            sa.text("UPDATE scan_executions SET lease_expires_at = now() - interval '1 s'")
        )
    runner = start_runner(database_url, tmp_path, processes=1)
    try:

        def requeued():
            with transaction() as conn:
                return (
                    conn.execute(
                        sa.text("SELECT status FROM scan_executions WHERE id = :id"),
                        {"id": claimed["id"]},
                    ).scalar()
                    == "queued"
                )

        def job_row():
            with transaction() as conn:
                return conn.execute(
                    sa.text(
                        "SELECT runs, last_error FROM runner_periodic_jobs "
                        "WHERE name = 'execution-lease-recovery'"
                    )
                ).one_or_none()

        wait_for(requeued, 30, "the execution to be requeued")
        # The job's work commits before its run is recorded (a separate, later
        # transaction), so the requeue can be seen while the row still says 0 runs.
        wait_for(lambda: (job_row() or (0,))[0] >= 1, 30, "the job's run to be recorded")
        wait_for(lambda: runner.events("ExecutionLeasesRecovered"), 30, "the recovery event")
        assert runner.events("ExecutionLeasesRecovered")[0]["requeued"] == 1
        assert job_row().last_error is None
    finally:
        runner.process.send_signal(signal.SIGTERM)
        runner.wait(timeout=30)
        runner.stop()


def test_two_runners_share_the_periodic_job_through_the_lease(database_url, tmp_path, engine):
    first = start_runner(database_url, tmp_path, name="first", processes=1)
    second = start_runner(database_url, tmp_path, name="second", processes=1)
    job = "execution-lease-recovery"  # other periodic jobs have longer intervals

    def completed() -> int:
        return sum(
            1
            for runner in (first, second)
            for event in runner.events("PeriodicJobCompleted")
            if event.get("job") == job
        )

    try:
        wait_for(lambda: completed() >= 6, 60, "several periodic runs")
        with transaction() as conn:
            row = conn.execute(
                sa.text("SELECT runs, claim_token FROM runner_periodic_jobs WHERE name = :name"),
                {"name": job},
            ).one()
        # Every completion was counted once in the shared row: no run happened twice at once.
        assert row.runs >= completed() - 2
    finally:
        for runner in (first, second):
            runner.process.send_signal(signal.SIGTERM)
        for runner in (first, second):
            assert runner.wait(timeout=30) == 0
            runner.stop()
