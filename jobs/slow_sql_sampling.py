"""Periodic job: sample pg_stat_statements into the slow-SQL history (OBS-4)."""

from __future__ import annotations

from app.ops.slow_sql import take_sample
from jobs.base import JobContext, PeriodicJob, PeriodicLease


def sample(ctx: JobContext, lease: PeriodicLease) -> None:
    take_sample(ctx.settings)


def job(settings) -> PeriodicJob:
    seconds = settings.ops.slow_sql_sample_seconds
    return PeriodicJob(
        "ops-slow-sql-sampling",
        sample,
        interval_seconds=seconds,
        lease_seconds=max(60.0, seconds * 2),
    )
