"""The change analysis in a real runner process: a worker killed mid-analysis (ANA-1, RUN).

The test holds the owner's watermark row locked, so the runner's analysis
transaction stops inside its statement; the worker is then SIGKILLed. Its
transaction never commits, its lease runs out (10 s, the shortest allowed),
and the replacement worker analyses the execution once.
"""

from __future__ import annotations

import os
import signal

import pytest
import sqlalchemy as sa

from app.search.postgres_store import PostgresStore
from tests.support.analysis import Scans, changes_of, hosts
from tests.support.processes import (
    LoggedProcess,
    base_env,
    netmap_command,
    wait_for,
    worker_pids,
)
from tests.support.sql import rows, scalar

pytestmark = pytest.mark.e2e

LEASE = 10
NET = "10.5.0.0/28"


def _runner(database_url: str, tmp_path) -> LoggedProcess:
    env = base_env(
        NETMAP_DATABASE_URL=database_url,
        NETMAP_RUNNER_IDLE_BACKOFF_MAX_SECONDS="0.2",
        NETMAP_RUNNER_WORKER_RESTART_BACKOFF_SECONDS="0.2",
        NETMAP_ANALYSIS_LEASE_SECONDS=str(LEASE),
        NETMAP_ANALYSIS_HEARTBEAT_SECONDS="3",
    )
    return LoggedProcess(netmap_command("runner", "--processes", "1"), env, tmp_path, "runner")


def test_a_worker_killed_mid_analysis_is_completed_once_by_the_next(
    database_url, engine, settings, tmp_path
):
    store = PostgresStore(settings)
    scans = Scans(settings=settings, store=store)
    owner = scans.owner()
    addresses = hosts(NET, 6)
    scans.scan(owner, [NET], [(ip, 22) for ip in addresses], ports="22")
    scans.settle()
    execution = scans.scan(owner, [NET], [(ip, 22) for ip in addresses[1:]], ports="22")
    scans.project()

    blocker = engine.connect()
    held = blocker.begin()
    blocker.execute(
        sa.text("SELECT 1 FROM analysis_owner_watermarks WHERE owner_id = :o FOR UPDATE"),
        {"o": owner},
    )
    runner = _runner(database_url, tmp_path)
    try:
        victim = wait_for(
            lambda: next(iter(worker_pids(runner)), None), 60, "the runner's worker process"
        )

        def analysis_waits_on_the_lock() -> bool:
            return bool(
                rows(
                    "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND application_name LIKE 'netmap-runner%'"
                )
            )

        wait_for(analysis_waits_on_the_lock, 60, "the runner's analysis to block")
        os.kill(victim, signal.SIGKILL)
        held.rollback()
        blocker.close()
        wait_for(lambda: runner.events("RunnerWorkerReplaced"), 30, "a replacement worker")
        wait_for(
            lambda: scalar(
                "SELECT processed_at IS NOT NULL FROM scan_analysis_queue WHERE execution_id = :e",
                e=execution,
            ),
            LEASE * 6,
            "the replacement to complete the analysis after the lease expired",
        )
        assert [(c.kind, c.ip) for c in changes_of(execution)] == [("gone", addresses[0])]
        completed = [
            e for e in runner.events("AnalysisCompleted") if e.get("execution_id") == execution
        ]
        assert len(completed) == 1 and completed[0]["recovered"] is True
        store.refresh_current()
        assert scans.gone_set(owner) == {(addresses[0], 22, "tcp")}
    finally:
        if not blocker.closed:
            blocker.close()
        runner.stop(timeout=40)
        store.close()
