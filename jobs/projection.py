"""Job kind: background asset projection slices from the outbox (PRJ, RUN-1).

``claim`` takes the next due outbox row (one short transaction); ``run`` does
one slice on it (``app.projection.slices``). The search store is opened once
per worker process, on first use, after the runner created this process's
engine. A slice cut short by the runner's shutdown deadline is reported as
``Cancelled`` (the row was released, or its lease will expire).
"""

from __future__ import annotations

from app.config import Settings
from app.projection.outbox import OutboxClaim
from app.projection.slices import ProjectionWorker
from jobs.base import Cancelled, JobContext


class ProjectionJob:
    name = "projection"

    def __init__(self, settings: Settings):
        self.settings = settings
        self._worker: ProjectionWorker | None = None

    def worker(self) -> ProjectionWorker:
        if self._worker is None:
            from app.search import open_store

            self._worker = ProjectionWorker(self.settings, open_store(self.settings))
        return self._worker

    def claim(self, ctx: JobContext) -> OutboxClaim | None:
        return self.worker().claim()

    def run(self, ctx: JobContext, work: OutboxClaim) -> None:
        outcome = self.worker().run_slice(work, stopping=ctx.stopping, cancelled=ctx.cancelled)
        if outcome.result == "cancelled":
            raise Cancelled(f"projection of execution {work.execution_id} cut short")


def job(settings: Settings) -> ProjectionJob:
    return ProjectionJob(settings)
