"""Periodic job: retry object deletes that failed earlier, until the objects are gone (EXP-6)."""

from __future__ import annotations

from app.config import Settings
from app.object_store import open_object_store
from app.object_store.deleter import retry_failed_deletes
from jobs.base import JobContext, PeriodicJob, PeriodicLease

BATCH = 500


def job(settings: Settings) -> PeriodicJob:
    config = settings.object_store
    objects = None

    def retry(ctx: JobContext, lease: PeriodicLease) -> None:
        nonlocal objects
        if objects is None:
            objects = open_object_store(settings)
        while not ctx.stopping.is_set():
            summary = retry_failed_deletes(
                objects,
                concurrency=config.delete_concurrency,
                base_backoff_seconds=config.delete_retry_interval_seconds,
                max_backoff_seconds=config.delete_retry_max_backoff_seconds,
                limit=BATCH,
            )
            if summary.attempted < BATCH:
                return
            lease.check()  # the job's heartbeat renews; stop if it was lost

    return PeriodicJob(
        "object-delete-retry",
        retry,
        interval_seconds=config.delete_retry_interval_seconds,
        lease_seconds=300,
    )
