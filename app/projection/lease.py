"""Keeping a projection claim alive, and knowing at once when it is gone (PRJ-3).

``LeaseGuard`` is the cancel event handed to the store for the duration of a
slice. It is set when ownership is lost (a renewal or checkpoint touched zero
rows), when the runner's shutdown deadline passes, or — without asking the
database — when the lease must have expired by the worker's own monotonic
clock (last successful renewal started + lease). The last check matters for a
worker that was paused (SIGSTOP, a long GC, a frozen VM): when it resumes, its
very next "may I send?" question is answered no, before any heartbeat had a
chance to run. The store checks the guard before every shard and wakes from
retry waits on it, so a worker that lost its claim sends nothing more.

``Heartbeat`` renews the lease in its own thread every
``projection_heartbeat_seconds`` (≤ lease/3), each renewal in its own short
transaction, independently of the page work. A renewal that finds the row no
longer ours sets the guard; one that fails for another reason (database
trouble) is retried soon, and the local deadline still bounds how long the
worker may keep sending. Lateness (renewal committed minus scheduled time) is
kept for the benchmark and the slice events.
"""

from __future__ import annotations

import logging
import threading
import time

from app.cancellation import EventLike
from app.observability import emit
from app.projection import outbox
from app.projection.outbox import OutboxClaim

# The local deadline stops a little before the database's: the lease in the row
# was computed from the server's clock at a moment after we started the renewal,
# and clocks of two machines may run at slightly different rates.
LOCAL_LEASE_FRACTION = 0.9
RENEW_RETRY_SECONDS = 0.5


class LeaseLost(Exception):
    """This worker no longer owns the claimed row (or must stop using it)."""

    def __init__(self, reason: str, operation: str):
        super().__init__(f"{reason} ({operation})")
        self.reason = reason
        self.operation = operation


class LeaseGuard(threading.Event):
    """A cancel event that also trips on the local lease deadline and the runner's cancel."""

    def __init__(self, lease_seconds: float, *, claimed_at: float, runner_cancel: EventLike):
        super().__init__()
        self._validity = lease_seconds * LOCAL_LEASE_FRACTION
        self._deadline = claimed_at + self._validity
        self._runner_cancel = runner_cancel
        self._reason_lock = threading.Lock()
        self.reason: str | None = None
        self.operation: str | None = None

    def renewed(self, started_at: float) -> None:
        """A renewal or checkpoint that began at ``started_at`` (monotonic) succeeded."""
        with self._reason_lock:
            self._deadline = max(self._deadline, started_at + self._validity)

    def lose(self, reason: str, operation: str) -> None:
        with self._reason_lock:
            if self.reason is None:
                self.reason, self.operation = reason, operation
        self.set()

    def is_set(self) -> bool:
        if super().is_set():
            return True
        if self._runner_cancel.is_set():
            self.lose("runner_cancelled", "shutdown")
            return True
        if time.monotonic() >= self._deadline:
            self.lose("lease_expired", "local_deadline")
            return True
        return False

    def wait(self, timeout: float | None = None) -> bool:
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            if self.is_set():
                return True
            now = time.monotonic()
            if end is not None and now >= end:
                return False
            # Wake for the local deadline and to look at the runner's cancel event.
            step = min(self._deadline - now, 0.2)
            if end is not None:
                step = min(step, end - now)
            if super().wait(max(step, 0.0)):
                return True

    def raise_if_lost(self) -> None:
        if self.is_set():
            raise LeaseLost(self.reason or "lease_lost", self.operation or "unknown")


class Heartbeat:
    """Renews ``claim`` every ``interval`` seconds in a thread until stopped."""

    def __init__(self, claim: OutboxClaim, guard: LeaseGuard, *, interval: float):
        self.claim = claim
        self.guard = guard
        self.interval = interval
        self.late_seconds: list[float] = []  # one entry per renewal
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"projection-heartbeat-{claim.execution_id}", daemon=True
        )

    @property
    def renewals(self) -> int:
        return len(self.late_seconds)

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop renewing; waits for a renewal in progress (so no renewal races the end write)."""
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join()

    def _run(self) -> None:
        due = time.monotonic() + self.interval
        while not self._stop.wait(max(0.0, due - time.monotonic())):
            if self.guard.reason == "lease_lost":
                return  # the database already said no; a tripped local deadline still asks
            started = time.monotonic()
            try:
                owned = outbox.renew(self.claim)
            except Exception as exc:  # noqa: BLE001 - database trouble: try again soon
                emit(
                    "ScanProjectionHeartbeatFailed",
                    level=logging.WARNING,
                    execution_id=self.claim.execution_id,
                    error=f"{type(exc).__name__}: {exc}"[:300],
                )
                due = time.monotonic() + min(self.interval, RENEW_RETRY_SECONDS)
                continue
            if not owned:
                self.guard.lose("lease_lost", "heartbeat")
                emit(
                    "ScanProjectionOutboxError",
                    level=logging.WARNING,
                    execution_id=self.claim.execution_id,
                    phase=self.claim.phase,
                    operation="heartbeat",
                    error="lease_lost",
                )
                return
            self.guard.renewed(started)
            late = max(0.0, time.monotonic() - due)
            self.late_seconds.append(late)
            due += self.interval
            if due < time.monotonic():
                due = time.monotonic() + self.interval  # paused past several beats: restart
