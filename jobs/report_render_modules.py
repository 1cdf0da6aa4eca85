"""The report renderer in a runner worker process: a ``WorkerService`` beside the job loop.

Each runner worker process applies the renderer selection at start (database
failures make the worker fail to start, and the supervisor restarts it with
backoff), refreshes it every ``refresh_seconds`` like the web processes, and
on shutdown — after the job loop has finished its current work (RUN-2) —
drains the generations and reaps their worker processes.
"""

from __future__ import annotations

from app.config import Settings
from app.modules.service import ReportRenderService
from jobs.base import JobContext

_CURRENT: ReportRenderService | None = None


def current_service(settings: Settings) -> ReportRenderService:
    """This worker process's renderer service (started on first use outside a runner worker)."""
    global _CURRENT
    if _CURRENT is None:
        _CURRENT = ReportRenderService(settings).start(background=True)
    return _CURRENT


class ReportRenderModules:
    name = "report-render-modules"

    def __init__(self, settings: Settings):
        self.settings = settings
        self._service: ReportRenderService | None = None

    def start(self, ctx: JobContext) -> None:
        global _CURRENT
        self._service = ReportRenderService(ctx.settings).start(background=True)
        _CURRENT = self._service

    def stop(self) -> None:
        global _CURRENT
        if self._service is not None:
            if _CURRENT is self._service:
                _CURRENT = None
            self._service.close()
            self._service = None
