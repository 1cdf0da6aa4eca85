"""The runner process prints the config check and runs the operator's samplers."""

from __future__ import annotations

import signal

import pytest
import sqlalchemy as sa

from app.db import transaction
from tests.support.processes import LoggedProcess, base_env, netmap_command, wait_for

pytestmark = pytest.mark.e2e


def _rows(sql: str):
    with transaction() as conn:
        return conn.execute(sa.text(sql)).all()


def test_runner_samples_resources_and_slow_sql(database_url, tmp_path, engine):
    env = base_env(
        NETMAP_DATABASE_URL=database_url,
        NETMAP_DATA_DIR=str(tmp_path / "var"),
        NETMAP_OPS_SAMPLE_SECONDS="1",
        NETMAP_OPS_SLOW_SQL_SAMPLE_SECONDS="1",
        NETMAP_RUNNER_IDLE_BACKOFF_MAX_SECONDS="0.2",
        NETMAP_SMTP_HOST="mail.example.com",
        NETMAP_SMTP_STARTTLS="false",
    )
    runner = LoggedProcess(netmap_command("runner", "--processes", "2"), env, tmp_path, "runner")
    try:
        checked = wait_for(lambda: runner.events("ConfigChecked"), 60, "the config check")
        assert checked[0]["process"] == "runner"
        assert any("smtp.host" in w["problem"] for w in runner.events("ConfigWarning"))

        def worker_samples():
            return _rows(
                "SELECT process, value FROM ops_resource_samples "
                "WHERE metric = 'process_rss_bytes' AND process LIKE 'runner-worker:%'"
            )

        samples = wait_for(lambda: len(worker_samples()) >= 2, 60, "worker RSS samples")
        assert samples
        assert all(value > 0 for _process, value in worker_samples())
        assert _rows("SELECT 1 FROM ops_resource_samples WHERE metric = 'memory_used_percent'")
        slow = wait_for(
            lambda: _rows("SELECT status, reason FROM ops_slow_sql_samples"),
            60,
            "a slow-SQL sample",
        )
        # The test database has no pg_stat_statements extension installed.
        assert (slow[0].status, slow[0].reason) == ("unavailable", "extension missing")
        # One runner samples at a time: every sampling run holds the periodic lease.
        jobs = {r.name for r in _rows("SELECT name FROM runner_periodic_jobs")}
        assert {"ops-resource-sampling", "ops-slow-sql-sampling"} <= jobs
    finally:
        runner.process.send_signal(signal.SIGTERM)
        assert runner.wait(timeout=60) == 0
        runner.stop()


def test_runner_refuses_to_start_on_config_check_errors(database_url, tmp_path):
    import subprocess

    env = base_env(
        NETMAP_DATABASE_URL=database_url,
        NETMAP_DATA_DIR=str(tmp_path / "var"),
        NETMAP_RUNNER_HEARTBEAT_SECONDS="80",
        NETMAP_RUNNER_WORKER_TIMEOUT="100",
    )
    done = subprocess.run(
        netmap_command("runner"), env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert "runner.heartbeat_seconds = 80.0: must be at most runner.worker_timeout / 2" in (
        done.stderr
    )
    assert "RunnerStarted" not in done.stderr
