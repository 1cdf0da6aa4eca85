"""A periodic job follows the interval its runner is configured with now.

``complete_periodic`` stores the next run time with the interval of the run that ended;
a runner restarted with a shorter interval (``[alerts] certificate_interval_seconds``
600 → 20) waited out the old 600 s before the first run under the new setting."""

from __future__ import annotations

import sqlalchemy as sa

from app.db import transaction
from jobs.base import claim_periodic, complete_periodic


def _claim(interval: float):
    return claim_periodic(
        "test-interval-job", interval_seconds=interval, lease_seconds=30, holder="test"
    )


def test_a_shorter_interval_applies_at_once_and_a_longer_one_after_the_stored_time(engine):
    first = _claim(600)
    assert first is not None
    assert complete_periodic(first, interval_seconds=600, error=None)
    assert _claim(600) is None  # due in ten minutes
    with transaction() as conn:  # the last run ended 25 s ago
        conn.execute(
            sa.text(
                "UPDATE runner_periodic_jobs SET last_finished_at = now() - interval '25 s' "
                "WHERE name = 'test-interval-job'"
            )
        )
    assert _claim(600) is None
    restarted = _claim(20)  # a runner configured with 20 s: due since 5 s
    assert restarted is not None
    assert complete_periodic(restarted, interval_seconds=20, error=None)
    assert _claim(20) is None  # just ran
    with transaction() as conn:
        runs = conn.execute(
            sa.text("SELECT runs FROM runner_periodic_jobs WHERE name = 'test-interval-job'")
        ).scalar_one()
    assert runs == 2
