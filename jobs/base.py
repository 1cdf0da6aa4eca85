"""What a job kind is, the context a worker hands it, and periodic jobs under a lease.

A job kind has ``claim(ctx)`` (one short transaction; returns the claimed work
or None) and ``run(ctx, work)``. Work that must happen once across all runner
instances at an interval (execution-lease recovery, traffic rollups) is a
``PeriodicJob``: its claim takes the row of ``runner_periodic_jobs`` with a
token and a lease, so two runners never run it at the same time, and a runner
that dies mid-run loses the lease instead of blocking the job forever. The lease kit
(``app.leases``) renews it while the job runs; the job polls ``lease.check()``.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol
from uuid import UUID

import sqlalchemy as sa

from app.cancellation import EventLike
from app.config import Settings
from app.db import transaction
from app.leases import LOST_BY_DATABASE, Heartbeat, LeasedRows, LeaseGuard
from app.observability import emit


class Cancelled(Exception):
    """Raised by job code that notices the shutdown deadline passed (or ownership was lost)."""


@dataclass
class JobContext:
    settings: Settings
    worker_id: int
    stopping: EventLike  # finish the current unit, claim nothing new
    cancelled: EventLike  # the shutdown deadline passed: abandon work now
    holder: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    # Tells the runner supervisor this worker is alive (long jobs beat through
    # check_cancelled, which they call between units of work anyway).
    heartbeat: Callable[[], None] | None = None

    def check_cancelled(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat()
        if self.cancelled.is_set():
            raise Cancelled("runner shutdown deadline passed")


class JobKind(Protocol):
    name: str

    def claim(self, ctx: JobContext) -> Any | None: ...

    def run(self, ctx: JobContext, work: Any) -> None: ...


class WorkerService(Protocol):
    """Something a worker process keeps running beside its job loop (e.g. module refresh)."""

    def start(self, ctx: JobContext) -> None: ...

    def stop(self) -> None: ...


# A periodic job's row is held under a lease while one runner runs it.
PERIODIC_ROWS = LeasedRows("runner_periodic_jobs", "name")


@dataclass(frozen=True)
class PeriodicLease:
    name: str
    claim_token: UUID
    lease_seconds: float
    # The kit's guard: lost when a renewal finds the row taken or none was confirmed in time.
    guard: LeaseGuard = field(
        default_factory=lambda: LeaseGuard(0, claimed_at=0), compare=False, repr=False
    )

    def renew(self) -> bool:
        """Extend the lease; False means another runner owns the job now (the guard is lost)."""
        started = time.monotonic()
        if PERIODIC_ROWS.renew(self.name, self.claim_token, self.lease_seconds):
            self.guard.renewed(started)
            return True
        self.guard.lose(LOST_BY_DATABASE, "renew")
        return False

    def check(self) -> None:
        """Raise ``Cancelled`` when the lease is lost (by the database or by expiry)."""
        if self.guard.is_set():
            raise Cancelled(f"lease {self.name} lost ({self.guard.reason})")


def claim_periodic(
    name: str, *, interval_seconds: float, lease_seconds: float, holder: str
) -> PeriodicLease | None:
    claimed_at = time.monotonic()
    with transaction() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO runner_periodic_jobs (name) VALUES (:name) ON CONFLICT DO NOTHING"
            ),
            {"name": name},
        )
        token = conn.execute(
            sa.text(
                """
                UPDATE runner_periodic_jobs
                   SET claim_token = gen_random_uuid(),
                       lease_expires_at = now() + make_interval(secs => :lease),
                       holder = :holder, last_started_at = now()
                 WHERE name = :name
                   -- Due by the stored time, or by this runner's interval since the last
                   -- run: a shorter interval configured since (a restart with a new
                   -- setting) applies at once, not after the old interval has passed.
                   AND (next_run_at <= now()
                        OR last_finished_at + make_interval(secs => :interval) <= now())
                   AND (lease_expires_at IS NULL OR lease_expires_at < now())
                RETURNING claim_token
                """
            ),
            {"name": name, "lease": lease_seconds, "holder": holder, "interval": interval_seconds},
        ).scalar()
    if token is None:
        return None
    return PeriodicLease(
        name=name,
        claim_token=token,
        lease_seconds=lease_seconds,
        guard=LeaseGuard(lease_seconds, claimed_at=claimed_at),
    )


def complete_periodic(lease: PeriodicLease, *, interval_seconds: float, error: str | None) -> bool:
    with transaction() as conn:
        row = conn.execute(
            sa.text(
                """
                UPDATE runner_periodic_jobs
                   SET claim_token = NULL, lease_expires_at = NULL, holder = NULL,
                       next_run_at = now() + make_interval(secs => :interval),
                       last_finished_at = now(), last_error = :error, runs = runs + 1
                 WHERE name = :name AND claim_token = :token
                RETURNING 1
                """
            ),
            {
                "name": lease.name,
                "token": lease.claim_token,
                "interval": interval_seconds,
                "error": error,
            },
        ).scalar()
    return bool(row)


class PeriodicJob:
    """A job kind that runs ``function`` at most once per interval across all runners."""

    def __init__(
        self,
        name: str,
        function: Callable[[JobContext, PeriodicLease], None],
        *,
        interval_seconds: float,
        lease_seconds: float = 300.0,
        completed_level: int = logging.INFO,
    ):
        self.name = name
        # A job that runs every second (the scheduler's tick) logs its completions at DEBUG;
        # a failed run is logged at ERROR whatever this says.
        self.completed_level = completed_level
        self.function = function
        self.interval_seconds = interval_seconds
        self.lease_seconds = lease_seconds
        self._not_before = 0.0  # local hint: we just ran it, no need to ask the database

    def claim(self, ctx: JobContext) -> PeriodicLease | None:
        if time.monotonic() < self._not_before:
            return None
        return claim_periodic(
            self.name,
            interval_seconds=self.interval_seconds,
            lease_seconds=self.lease_seconds,
            holder=f"{ctx.holder}:{ctx.worker_id}",
        )

    def run(self, ctx: JobContext, work: PeriodicLease) -> None:
        started = time.perf_counter()
        error: str | None = None
        try:
            with Heartbeat(
                work.renew,
                work.guard,
                interval=self.lease_seconds / 3,
                name=f"periodic-heartbeat-{self.name}",
                failed_event="PeriodicJobHeartbeatFailed",
                event_fields={"job": self.name},
            ):
                self.function(ctx, work)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"[:1000]
            raise
        finally:
            complete_periodic(work, interval_seconds=self.interval_seconds, error=error)
            self._not_before = time.monotonic() + self.interval_seconds
            emit(
                "PeriodicJobCompleted",
                level=self.completed_level if error is None else logging.ERROR,
                job=self.name,
                duration_ms=round((time.perf_counter() - started) * 1000, 1),
                success=error is None,
                error=error,
            )
