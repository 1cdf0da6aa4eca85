"""Job kinds: build queued result exports under a lease, and delete expired ones (EXP-8, EXP-9).

``ExportBuildJob.claim`` takes the next due export if this host runs fewer than
``[exports] concurrency`` builds (across all its runner processes), and deletes
the objects of builds that ran out of attempts as compensation; ``run`` builds
it (``app.exports.build``). The search and object stores are opened once per
worker process, after the runner created this process's engine.

``export_expiry`` is periodic (one runner at a time): exports past their
retention have their objects deleted through the bounded deleter.
"""

from __future__ import annotations

import socket

from app.config import Settings
from app.exports import records
from app.exports.build import build_export
from app.exports.records import ExportClaim
from app.exports.service import expire_exports
from app.object_store import open_object_store
from app.object_store.deleter import delete_objects
from jobs.base import Cancelled, JobContext, PeriodicJob, PeriodicLease


class ExportBuildJob:
    name = "export_build"

    def __init__(self, settings: Settings, *, host: str | None = None):
        self.settings = settings
        self.host = host or socket.gethostname()
        self._search = None
        self._objects = None

    def stores(self):
        if self._search is None:
            from app.search import open_store

            self._search = open_store(self.settings)
            self._objects = open_object_store(self.settings)
        return self._search, self._objects

    def claim(self, ctx: JobContext) -> ExportClaim | None:
        config = self.settings.exports
        claim, exhausted = records.claim_next_build(
            host=self.host,
            concurrency=config.concurrency,
            lease_seconds=config.lease_seconds,
            max_attempts=config.max_attempts,
        )
        if exhausted:
            _, objects = self.stores()
            delete_objects(
                objects,
                exhausted,
                concurrency=self.settings.object_store.delete_concurrency,
                origin="export_failed",
            )
        return claim

    def run(self, ctx: JobContext, work: ExportClaim) -> None:
        search, objects = self.stores()
        outcome = build_export(
            self.settings,
            work,
            search_store=search,
            object_store=objects,
            runner_cancel=ctx.cancelled,
        )
        if outcome.result == "lease_lost" and ctx.cancelled.is_set():
            raise Cancelled(f"export {work.id} cut short")


def job(settings: Settings) -> ExportBuildJob:
    return ExportBuildJob(settings)


def expiry_job(settings: Settings) -> PeriodicJob:
    objects = None

    def expire(ctx: JobContext, lease: PeriodicLease) -> None:
        nonlocal objects
        if objects is None:
            objects = open_object_store(settings)
        while not ctx.stopping.is_set() and expire_exports(settings, objects, limit=500) == 500:
            lease.check()  # the job's heartbeat renews; stop if it was lost

    return PeriodicJob(
        "export-expiry",
        expire,
        interval_seconds=settings.exports.expiry_interval_seconds,
        lease_seconds=300,
    )
