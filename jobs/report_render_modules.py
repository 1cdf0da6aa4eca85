"""The report renderer in a runner worker process: a ``WorkerService`` beside the job loop.

Each runner worker process applies the renderer selection at start (database
failures make the worker fail to start, and the supervisor restarts it with
backoff), refreshes it every ``refresh_seconds`` like the web processes, and
on shutdown — after the job loop has finished its current work (RUN-2) —
drains the generations and reaps their worker processes. Report jobs take
their lease from ``service()``.
"""

from __future__ import annotations

from app.config import Settings
from app.modules.service import ReportRenderService
from jobs.base import JobContext

_service: ReportRenderService | None = None


def service() -> ReportRenderService:
    """The renderer service of this runner worker process (started by the worker)."""
    if _service is None:
        raise RuntimeError("the report renderer service is not started in this process")
    return _service


class ReportRenderModules:
    name = "report-render-modules"

    def __init__(self, settings: Settings):
        self.settings = settings
        self._service: ReportRenderService | None = None

    def start(self, ctx: JobContext) -> None:
        global _service
        self._service = ReportRenderService(ctx.settings).start(background=True)
        _service = self._service

    def stop(self) -> None:
        global _service
        if self._service is not None:
            self._service.close()
            if _service is self._service:
                _service = None
            self._service = None
