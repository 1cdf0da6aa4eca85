"""The job kinds and worker services every runner worker runs.

Each job kind lives in its own module under ``jobs/``; adding one means adding
it to ``job_kinds``. The order is the order a worker polls them in.
"""

from __future__ import annotations

from app.config import Settings
from jobs.base import JobKind, WorkerService


def job_kinds(settings: Settings) -> list[JobKind]:
    from jobs import (
        execution_recovery,
        exports,
        object_delete_retry,
        projection,
        reports,
        resource_sampling,
        schedules,
        slow_sql_sampling,
    )

    kinds: list[JobKind] = [
        execution_recovery.job(settings),
        schedules.job(settings),
        projection.job(settings),
        exports.job(settings),
        exports.expiry_job(settings),
        reports.job(settings),
        reports.delivery_job(settings),
        object_delete_retry.job(settings),
        resource_sampling.job(settings),
        slow_sql_sampling.job(settings),
    ]
    from jobs import alert_conditions, alert_delivery, analysis, facts_retention, task_purge

    kinds.extend(analysis.jobs(settings))
    kinds.append(alert_delivery.job(settings))
    kinds.extend(alert_conditions.jobs(settings))
    kinds.append(task_purge.job(settings))
    kinds.append(task_purge.retention_job(settings))
    kinds.append(facts_retention.job(settings))
    if settings.traffic.enabled:
        from jobs import traffic_rollup

        kinds.append(traffic_rollup.job(settings))
    return kinds


def worker_services(settings: Settings) -> list[WorkerService]:
    from jobs import report_render_modules

    return [report_render_modules.ReportRenderModules(settings)]
