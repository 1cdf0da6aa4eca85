"""Job kinds: change analysis of finished executions, and pruning its queue (ANA-1, ANA-7).

``AnalysisJob.claim`` takes the next analysable queue row (one short
transaction); ``run`` analyses it with ``app.analysis.worker``. The search
store is opened once per worker process, on first use, after the runner
created this process's engine. ``prune_job`` deletes processed queue rows
older than ``[analysis] retention_days``, at most once per interval across
all runners.
"""

from __future__ import annotations

from app.analysis import queue
from app.analysis.queue import AnalysisClaim
from app.analysis.worker import AnalysisWorker
from app.config import Settings
from app.observability import emit
from jobs.base import JobContext, JobKind, PeriodicJob, PeriodicLease


class AnalysisJob:
    name = "analysis"

    def __init__(self, settings: Settings):
        self.settings = settings
        self._worker: AnalysisWorker | None = None

    def worker(self) -> AnalysisWorker:
        if self._worker is None:
            from app.alerts.evaluate import change_set_hook
            from app.alerts.searched_changes import follow_up
            from app.search import open_store

            store = open_store(self.settings)
            self._worker = AnalysisWorker(
                self.settings,
                store,
                on_change_set=change_set_hook(self.settings.alerts, store),
                after_change_set=follow_up(self.settings.alerts, store),
            )
        return self._worker

    def claim(self, ctx: JobContext) -> AnalysisClaim | None:
        return self.worker().claim()

    def run(self, ctx: JobContext, work: AnalysisClaim) -> None:
        self.worker().run(work)


def prune_job(settings: Settings) -> PeriodicJob:
    retention_days = settings.analysis.retention_days

    def prune(ctx: JobContext, lease: PeriodicLease) -> None:
        deleted = queue.prune_processed(retention_days=retention_days)
        if deleted:
            emit("AnalysisQueuePruned", rows=deleted, retention_days=retention_days)

    return PeriodicJob(
        "analysis_prune", prune, interval_seconds=settings.analysis.prune_interval_seconds
    )


def jobs(settings: Settings) -> list[JobKind]:
    return [AnalysisJob(settings), prune_job(settings)]
