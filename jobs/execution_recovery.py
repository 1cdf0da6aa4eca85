"""Periodic job: requeue scanner executions whose lease expired (SCN-3)."""

from __future__ import annotations

from app.db import transaction
from app.scan_control.dispatch import recover_expired_leases
from jobs.base import JobContext, PeriodicJob, PeriodicLease

BATCH = 500


def recover(ctx: JobContext, lease: PeriodicLease) -> None:
    # Batches keep each transaction short even after a long outage.
    while not ctx.stopping.is_set():
        with transaction() as conn:
            result = recover_expired_leases(
                conn, retry_backoff_seconds=ctx.settings.scan.retry_backoff_seconds, batch=BATCH
            )
        if result.requeued + result.failed < BATCH:
            return


def job(settings) -> PeriodicJob:
    return PeriodicJob(
        "execution-lease-recovery",
        recover,
        interval_seconds=settings.runner.execution_recovery_interval_seconds,
        lease_seconds=60,
    )
