"""Schedules with real `netmap runner` processes: two runners, one killed -9, a restart.

A task scheduled every ``min_schedule_seconds`` (set low here) fires N times while two
runners tick; the one holding the scheduler's lease is killed with SIGKILL in the middle
and a third runner starts later. Every fire time must have exactly one slot and each
started slot exactly one run: N fire times → N runs, none doubled, none lost.
"""

from __future__ import annotations

import itertools
import os
import signal
import threading
from datetime import datetime, timedelta

import psutil
import pytest
import sqlalchemy as sa

from app.db import transaction
from app.scan_control.runs import cancel_run
from tests.support.processes import LoggedProcess, base_env, netmap_command, wait_for
from tests.support.settings import make_settings

pytestmark = pytest.mark.e2e

EVERY = 3  # seconds between fire times
LEASE = 1.5  # the scheduler's lease: a killed ticker's expires well within one interval
FIRE_TIMES = 10


@pytest.fixture
def settings(database_url, tmp_path):
    return make_settings(database_url, tmp_path, scan={"min_schedule_seconds": EVERY})


def start_runner(database_url, tmp_path, name):
    env = base_env(
        NETMAP_DATABASE_URL=database_url,
        NETMAP_SCAN_MIN_SCHEDULE_SECONDS=str(EVERY),
        NETMAP_RUNNER_SCHEDULE_TICK_SECONDS="0.2",
        NETMAP_RUNNER_SCHEDULE_LEASE_SECONDS=str(LEASE),
        NETMAP_RUNNER_IDLE_BACKOFF_MAX_SECONDS="0.1",
    )
    return LoggedProcess(netmap_command("runner", "--processes", "1"), env, tmp_path, name)


def kill_runner(runner: LoggedProcess) -> None:
    """SIGKILL the runner and its worker: no shutdown, no lease released."""
    processes = [psutil.Process(runner.pid), *psutil.Process(runner.pid).children(recursive=True)]
    for process in processes:
        os.kill(process.pid, signal.SIGKILL)
    psutil.wait_procs(processes, timeout=10)


def active_runs(task_id: int) -> list[int]:
    with transaction() as conn:
        return list(
            conn.execute(
                sa.text(
                    "SELECT id FROM task_runs WHERE task_id = :t "
                    "AND status IN ('queued', 'running')"
                ),
                {"t": task_id},
            ).scalars()
        )


def scheduler_holder_pid() -> int | None:
    with transaction() as conn:
        holder = conn.execute(
            sa.text(
                "SELECT holder FROM runner_periodic_jobs WHERE name = 'task-schedules' "
                "AND claim_token IS NOT NULL"
            )
        ).scalar()
    return int(holder.split(":")[-2]) if holder else None


def test_two_runners_one_killed_and_a_restart_start_one_run_per_fire_time(
    api, database_url, tmp_path
):
    user = api.user()
    created = user.post(
        "/api/tasks", json={"name": "every-3s", "targets": ["192.0.2.1"], "ports": "80"}
    ).get_json()["task"]
    task_id = created["id"]
    for run_id in active_runs(task_id):
        cancel_run(None, task_id, run_id)

    # The scans themselves are not the point: each run is cancelled as soon as it shows up,
    # so the next fire time finds no active run (no scanner is needed).
    stop = threading.Event()

    def finish_runs():
        while not stop.is_set():
            for run_id in active_runs(task_id):
                cancel_run(None, task_id, run_id)
            stop.wait(0.1)

    finisher = threading.Thread(target=finish_runs, daemon=True)
    finisher.start()
    first = start_runner(database_url, tmp_path, "first")
    second = start_runner(database_url, tmp_path, "second")
    runners = [first, second]
    third = None
    try:
        wait_for(lambda: first.events("RunnerWorkerStarted"), 60, "the first runner")
        wait_for(lambda: second.events("RunnerWorkerStarted"), 60, "the second runner")
        response = user.patch(f"/api/tasks/{task_id}", json={"schedule": {"every_seconds": EVERY}})
        assert response.status_code == 200, response.get_json()

        def handled() -> int:
            with transaction() as conn:
                return conn.execute(
                    sa.text("SELECT count(*) FROM scan_schedule_slots WHERE task_id = :t"),
                    {"t": task_id},
                ).scalar()

        wait_for(lambda: handled() >= 3, 60, "three fire times")
        # Kill the runner whose worker holds the scheduler's lease, the moment it holds it.
        # A tick holds the lease for milliseconds every 0.2 s: asked every 10 ms.
        victim_pid = wait_for(scheduler_holder_pid, 60, "a tick in progress", interval=0.01)
        victim = next(
            r for r in runners if victim_pid in {c.pid for c in psutil.Process(r.pid).children()}
        )
        kill_runner(victim)
        survivor = second if victim is first else first
        wait_for(lambda: handled() >= 6, 60, "fire times after the kill")
        third = start_runner(database_url, tmp_path, "restarted")
        wait_for(lambda: third.events("RunnerWorkerStarted"), 60, "the restarted runner")
        wait_for(lambda: handled() >= FIRE_TIMES, 90, f"{FIRE_TIMES} fire times")
        survivor.process.send_signal(signal.SIGTERM)
        third.process.send_signal(signal.SIGTERM)
        assert survivor.wait(timeout=30) == 0 and third.wait(timeout=30) == 0
    finally:
        stop.set()
        finisher.join(10)
        for runner in (first, second, third):
            if runner is not None:
                runner.stop()

    with transaction() as conn:
        slots = conn.execute(
            sa.text(
                "SELECT fire_at, outcome, reason, run_id, caught_up FROM scan_schedule_slots "
                "WHERE task_id = :t ORDER BY fire_at"
            ),
            {"t": task_id},
        ).all()
        runs = (
            conn.execute(
                sa.text(
                    "SELECT id FROM task_runs WHERE task_id = :t AND trigger = 'schedule' "
                    "ORDER BY id"
                ),
                {"t": task_id},
            )
            .scalars()
            .all()
        )
    assert len(slots) >= FIRE_TIMES
    fire_times: list[datetime] = [s.fire_at for s in slots]
    # Consecutive fire times of the grid: none lost (no catch-up was needed), none doubled.
    assert all(b - a == timedelta(seconds=EVERY) for a, b in itertools.pairwise(fire_times))
    assert [(s.outcome, s.reason, s.caught_up) for s in slots] == [("started", None, 0)] * len(
        slots
    )
    assert sorted(s.run_id for s in slots) == list(runs)
    assert len(set(runs)) == len(slots)
