"""Periodic job: start the runs of due task schedules (docs/schedules.md).

One runner at a time ticks (the ``runner_periodic_jobs`` lease, renewed by the kit's
heartbeat; a killed ticker's lease expires after ``[runner] schedule_lease_seconds``).
Exactly-once does not rest on that lease: ``app.scan_control.schedules.tick`` locks the
due schedules and commits each slot row, its run and the schedule's advance together.
"""

from __future__ import annotations

import logging

from app.config import Settings
from app.scan_control.schedules import tick
from jobs.base import JobContext, PeriodicJob, PeriodicLease


def run_tick(ctx: JobContext, lease: PeriodicLease) -> None:
    tick(limits=ctx.settings.scan, check=lease.check, stopping=ctx.stopping.is_set)


def job(settings: Settings) -> PeriodicJob:
    return PeriodicJob(
        "task-schedules",
        run_tick,
        interval_seconds=settings.runner.schedule_tick_seconds,
        lease_seconds=settings.runner.schedule_lease_seconds,
        # Every second: the slots it handles are logged (TaskScheduleSlot), not each tick.
        completed_level=logging.DEBUG,
    )
