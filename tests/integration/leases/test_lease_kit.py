"""The lease kit against a real PostgreSQL table of its own: lost lease, expiry takeover,
and a holder killed with SIGKILL mid job (the lease runs out and another claims the row).

Each user of the kit has the same cases through its real queue: projection
(tests/integration/projection/test_failures.py, tests/e2e/test_projection_runner.py),
analysis (tests/e2e/test_analysis_runner.py), exports
(tests/integration/exports/test_exports.py), report jobs and deliveries
(tests/integration/reports/), periodic jobs (tests/integration/test_traffic_job.py,
tests/e2e/test_runner_process.py) and tests/integration/leases/test_lease_users.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import pytest
import sqlalchemy as sa

from app.db import transaction
from app.leases import Heartbeat, LeasedRows, LeaseGuard, LeaseLost

PROBE = LeasedRows("lease_kit_probe", "id")


@pytest.fixture
def probe(engine):
    with transaction() as conn:
        conn.execute(
            sa.text(
                "CREATE TABLE lease_kit_probe (id int PRIMARY KEY, claim_token uuid, "
                "lease_expires_at timestamptz, done_by uuid)"
            )
        )
        conn.execute(sa.text("INSERT INTO lease_kit_probe (id) VALUES (1)"))
    return PROBE


def _claim(lease_seconds: float) -> uuid.UUID | None:
    """A domain's claim: the row when free or its lease has run out."""
    with transaction() as conn:
        return conn.execute(
            sa.text(
                """
                UPDATE lease_kit_probe
                   SET claim_token = gen_random_uuid(),
                       lease_expires_at = now() + make_interval(secs => :lease)
                 WHERE id = 1 AND (lease_expires_at IS NULL OR lease_expires_at < now())
                RETURNING claim_token
                """
            ),
            {"lease": lease_seconds},
        ).scalar()


def _finish(token: uuid.UUID) -> bool:
    with transaction() as conn:
        return bool(
            conn.execute(
                sa.text(
                    "UPDATE lease_kit_probe SET done_by = :token, claim_token = NULL "
                    "WHERE id = 1 AND claim_token = :token AND lease_expires_at > now() "
                    "RETURNING 1"
                ),
                {"token": token},
            ).scalar()
        )


def test_a_lost_lease_stops_the_work_before_its_next_write(probe):
    token = _claim(60)
    assert token is not None
    guard = LeaseGuard(60, claimed_at=time.monotonic())
    with Heartbeat(lambda: probe.renew(1, token, 60), guard, interval=0.05):
        with transaction() as conn:  # another worker took the row over
            conn.execute(sa.text("UPDATE lease_kit_probe SET claim_token = gen_random_uuid()"))
        assert guard.wait(20)
    assert guard.reason == "lease_lost"
    with pytest.raises(LeaseLost):
        guard.raise_if_lost()
    assert not _finish(token)


def test_an_expired_lease_is_taken_over_and_the_old_holder_cannot_renew_or_write(probe):
    first = _claim(0.3)
    assert first is not None and _claim(60) is None  # held
    time.sleep(0.5)
    second = _claim(60)
    assert second is not None and second != first
    assert not probe.renew(1, first, 60)
    assert not _finish(first)
    assert probe.renew(1, second, 60) and _finish(second)


def test_a_holder_killed_mid_job_loses_the_row_when_its_lease_runs_out(probe, database_url):
    script = textwrap.dedent(
        f"""
        import sys, time
        from app import db
        from app.leases import Heartbeat, LeasedRows, LeaseGuard
        import sqlalchemy as sa
        db.set_engine(db.create_engine({database_url!r}))
        with db.transaction() as conn:
            token = conn.execute(sa.text(
                "UPDATE lease_kit_probe SET claim_token = gen_random_uuid(), "
                "lease_expires_at = now() + interval '2 seconds' WHERE id = 1 "
                "RETURNING claim_token")).scalar()
        rows = LeasedRows("lease_kit_probe", "id")
        guard = LeaseGuard(2, claimed_at=time.monotonic())
        Heartbeat(lambda: rows.renew(1, token, 2), guard, interval=0.2).start()
        print(token, flush=True)
        while True:  # the job: works as long as the guard allows
            guard.raise_if_lost()
            time.sleep(0.05)
        """
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=os.environ.copy()
    )
    try:
        token = uuid.UUID(holder.stdout.readline().strip())

        def expires_at():
            with transaction() as conn:
                return conn.execute(
                    sa.text("SELECT lease_expires_at FROM lease_kit_probe")
                ).scalar()

        first = expires_at()
        deadline = time.monotonic() + 30
        while expires_at() <= first:  # the heartbeat extends the lease while alive
            assert time.monotonic() < deadline, "the holder's heartbeat never renewed"
            time.sleep(0.1)
        assert _claim(60) is None  # alive and renewing: nobody else gets it
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(10)
        deadline = time.monotonic() + 30
        while (taken := _claim(60)) is None:
            assert time.monotonic() < deadline, "the killed holder's lease never ran out"
            time.sleep(0.1)
        assert taken != token
        assert not PROBE.renew(1, token, 60) and not _finish(token)
        assert _finish(taken)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
