"""The kit's lease cases once per user, through each user's real queue and claim:
a lost lease trips the Heartbeat's guard, an expired lease is taken over by the next
claim (and the old holder cannot renew), a holder killed with SIGKILL mid job loses
its row once its lease runs out. The users are listed in tests/support/lease_users.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.leases import Heartbeat, LeaseGuard
from tests.support.lease_users import USERS, make_work_for_every_user, steal, token_of

PROJECT_ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.parametrize("name", sorted(USERS))


@pytest.fixture
def work(api):
    make_work_for_every_user(api)


def test_a_lost_lease_trips_the_heartbeat_guard(work, name):
    user = USERS[name]
    claimed = user.claim(60)
    assert claimed is not None
    guard = LeaseGuard(60, claimed_at=time.monotonic())
    with Heartbeat(lambda: user.renew(claimed), guard, interval=0.05) as beat:
        time.sleep(0.2)
        assert not guard.is_set()  # renewing our own row
        steal(claimed, user)
        assert guard.wait(30)
    assert guard.reason == "lease_lost" and beat.renewals >= 1


def test_an_expired_lease_is_taken_over_by_the_next_claim(work, name):
    user = USERS[name]
    first = user.claim(0.5)
    assert first is not None
    assert user.claim(60) is None  # held: nobody else gets it
    deadline = time.monotonic() + 30
    while (second := user.claim(60)) is None:
        assert time.monotonic() < deadline, "the expired lease was never taken over"
        time.sleep(0.1)
    assert token_of(second) != token_of(first)
    assert user.renew(first) is False
    assert user.renew(second) is True


def test_a_holder_killed_mid_job_loses_its_row_when_the_lease_runs_out(work, name, database_url):
    script = f"""
import time
from app import db
from app.leases import Heartbeat, LeaseGuard
from tests.support.lease_users import USERS
db.set_engine(db.create_engine({database_url!r}))
user = USERS[{name!r}]
claimed = user.claim(2)
guard = LeaseGuard(2, claimed_at=time.monotonic())
Heartbeat(lambda: user.renew(claimed), guard, interval=0.2).start()
print(claimed.claim_token, flush=True)
while True:
    guard.raise_if_lost()
    time.sleep(0.05)
"""
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    holder = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=PROJECT_ROOT, env=env
    )
    user = USERS[name]
    try:
        token = holder.stdout.readline().strip()
        assert token, "the holder did not claim"
        time.sleep(2.5)  # past the first lease: only its heartbeat keeps the row
        assert holder.poll() is None and user.claim(60) is None
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(10)
        deadline = time.monotonic() + 30
        while (taken := user.claim(60)) is None:
            assert time.monotonic() < deadline, "the killed holder's lease never ran out"
            time.sleep(0.1)
        assert str(token_of(taken)) != token
        assert user.renew(taken) is True
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
