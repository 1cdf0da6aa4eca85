"""Periodic job: traffic rollups in the runner (TRF-3..6), only when ``[traffic] enabled``.

Every ``interval_seconds`` (5 minutes) one runner claims the ``traffic-rollup``
lease and runs the 5-minute rollup for today into PostgreSQL; when the
``traffic-rollup-day`` period is due it also runs the day rollup for
yesterday, inside the same lease, so the two never read the same new bytes at
the same time (commits are compare-and-set on the checkpoints as well). TRF-5:
a past day the log has not yet shown complete is read again
on every five-minute run until it is verified: such a day run (or a failed one)
leaves the day period due at once; only a run that verified every day waits
``day_interval_seconds`` (verified days are then cached for ``day_cache_hours``,
so the hourly run itself reads nothing). Both
leases are renewed while files are being read; a lost lease or the runner's
cancel deadline abandons the run before the current domain commits, and that
domain's checkpoints stay where they were. Each run records its JSON summary
as a ``TrafficRollupCompleted`` event.
"""

from __future__ import annotations

import logging
import socket
import time

from app.leases import Heartbeat
from app.observability import emit
from app.traffic.rollup import RollupOptions, RollupRun, RollupSummary
from app.traffic.sinks import DatabaseRowSink
from app.traffic.store_postgres import PostgresCheckpointStore
from jobs.base import (
    JobContext,
    PeriodicJob,
    PeriodicLease,
    claim_periodic,
    complete_periodic,
)

JOB_NAME = "traffic-rollup"
DAY_JOB_NAME = "traffic-rollup-day"


class LeaseKeeper:
    """Called as bytes are read: renews the leases now and then, stops on cancel."""

    def __init__(self, ctx: JobContext, leases: list[PeriodicLease], every_seconds: float):
        self.ctx = ctx
        self.leases = leases
        self.every_seconds = every_seconds
        self._last = time.monotonic()

    def __call__(self, _bytes: int = 0) -> None:
        self.ctx.check_cancelled()
        if time.monotonic() - self._last < self.every_seconds:
            return
        self._last = time.monotonic()
        for lease in self.leases:
            lease.renew()  # the job's heartbeat renews too; a lost one stops the read here
            lease.check()


def _run(ctx: JobContext, keeper: LeaseKeeper, granularity: str) -> RollupSummary:
    traffic = ctx.settings.traffic
    run = RollupRun(
        traffic,
        PostgresCheckpointStore(),
        DatabaseRowSink(),
        on_bytes=keeper,
        should_stop=ctx.stopping.is_set,
    )
    summary = run.execute(
        RollupOptions(
            granularity=granularity, source_server=traffic.source_server or socket.gethostname()
        )
    )
    fields = summary.as_dict()
    emit(
        "TrafficRollupCompleted",
        level=logging.INFO if summary.ok else logging.WARNING,
        **fields,
    )
    return summary


def run_rollups(ctx: JobContext, lease: PeriodicLease) -> None:
    traffic = ctx.settings.traffic
    keeper = LeaseKeeper(ctx, [lease], traffic.lease_seconds / 3)
    _run(ctx, keeper, "5m")
    if ctx.stopping.is_set():
        return
    day_lease = claim_periodic(
        DAY_JOB_NAME,
        interval_seconds=traffic.day_interval_seconds,
        lease_seconds=traffic.lease_seconds,
        holder=f"{ctx.holder}:{ctx.worker_id}",
    )
    if day_lease is None:
        return
    keeper.leases.append(day_lease)
    error: str | None = None
    # Until a day run verifies every past day, the next five-minute run reads them again.
    interval = 0.0
    try:
        with Heartbeat(
            day_lease.renew,
            day_lease.guard,
            interval=traffic.lease_seconds / 3,
            name=f"periodic-heartbeat-{DAY_JOB_NAME}",
            failed_event="PeriodicJobHeartbeatFailed",
            event_fields={"job": DAY_JOB_NAME},
        ):
            summary = _run(ctx, keeper, "day")
        if summary.ok and not summary.unverified_days:
            interval = traffic.day_interval_seconds
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"[:1000]
        raise
    finally:
        complete_periodic(day_lease, interval_seconds=interval, error=error)


def job(settings) -> PeriodicJob:
    return PeriodicJob(
        JOB_NAME,
        run_rollups,
        interval_seconds=settings.traffic.interval_seconds,
        lease_seconds=settings.traffic.lease_seconds,
    )
