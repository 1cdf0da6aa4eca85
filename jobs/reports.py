"""Job kinds: generate reports under a lease, and deliver their mail (REP-1..6).

``ReportGenerateJob.claim`` first creates the reports of scheduled periods
that closed (at most every ``[reports] schedule_check_seconds`` per process;
the unique schedule key makes concurrent runners harmless), then claims the
next due report job; ``run`` takes it through capture, generate and commit
(``app.reports.pipeline``). The renderer is the worker process's
``ReportRenderService`` (started by the ``report-render-modules`` worker
service), so a renderer swap reaches reports through the registry's
generation handles.

``ReportDeliveryJob`` sends queued deliveries (``app.reports.delivery``).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from app.config import Settings
from app.object_store import open_object_store
from app.reports import records
from app.reports.delivery import DeliveryClaim, claim_next_delivery, deliver
from app.reports.pipeline import RendererSource, run_report
from app.reports.records import ReportClaim
from app.search import open_store
from jobs.base import JobContext


class ReportGenerateJob:
    name = "report_generate"

    def __init__(self, settings: Settings, *, renderer: RendererSource | None = None):
        self.settings = settings
        self._renderer = renderer
        self._objects = None
        self._store = None
        self._next_schedule_check = 0.0

    def renderer(self) -> RendererSource:
        if self._renderer is None:
            from jobs.report_render_modules import current_service

            self._renderer = current_service(self.settings)
        return self._renderer

    def objects(self):
        if self._objects is None:
            self._objects = open_object_store(self.settings)
        return self._objects

    def search_store(self):
        if self._store is None:  # opened in the worker process, on first use
            self._store = open_store(self.settings)
        return self._store

    def claim(self, ctx: JobContext) -> ReportClaim | None:
        config = self.settings.reports
        if time.monotonic() >= self._next_schedule_check:
            records.create_due_scheduled_reports(datetime.now(UTC))
            self._next_schedule_check = time.monotonic() + config.schedule_check_seconds
        return records.claim_next_job(
            lease_seconds=config.lease_seconds, max_attempts=config.max_attempts
        )

    def run(self, ctx: JobContext, work: ReportClaim) -> None:
        config = self.settings.reports
        run_report(
            work,
            renderer=self.renderer(),
            object_store=self.objects(),
            search_store=self.search_store(),
            delete_concurrency=self.settings.object_store.delete_concurrency,
            heartbeat_seconds=config.heartbeat_seconds,
            max_attempts=config.max_attempts,
            wait_seconds=config.incomplete_wait_seconds,
        )


class ReportDeliveryJob:
    name = "report_delivery"

    def __init__(self, settings: Settings):
        self.settings = settings
        self._objects = None

    def claim(self, ctx: JobContext) -> DeliveryClaim | None:
        return claim_next_delivery(lease_seconds=self.settings.reports.delivery_lease_seconds)

    def run(self, ctx: JobContext, work: DeliveryClaim) -> None:
        if self._objects is None:
            self._objects = open_object_store(self.settings)
        deliver(self.settings, work, self._objects)


def job(settings: Settings) -> ReportGenerateJob:
    return ReportGenerateJob(settings)


def delivery_job(settings: Settings) -> ReportDeliveryJob:
    return ReportDeliveryJob(settings)
