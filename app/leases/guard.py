"""The token-and-expiry guard: may this worker still act on its claim? (architecture.md)

``LeaseGuard`` is an event that is set when the claim must no longer be used:

- ``lease_lost``: the database said the row is not ours (a renewal or a token-checked
  write touched zero rows);
- ``lease_expired``: by the worker's own monotonic clock the lease must have run out
  (the last confirmed renewal started + lease, times ``LOCAL_LEASE_FRACTION``), i.e. the
  renewals could not be confirmed in time. Asked without the database, so a worker
  that was paused (SIGSTOP, a long GC, a frozen VM) stops at its very next question,
  before any heartbeat had a chance to run;
- ``runner_cancelled``: the runner's shutdown deadline passed (when a cancel event is
  given).

Work polls ``raise_if_lost()`` (or hands the guard to code that waits on an event) before
every write or send; the guard is what "lost" means for every lease user.
"""

from __future__ import annotations

import threading
import time

from app.cancellation import EventLike

# The local deadline stops a little before the database's: the lease in the row
# was computed from the server's clock at a moment after we started the renewal,
# and clocks of two machines may run at slightly different rates.
LOCAL_LEASE_FRACTION = 0.9
LOST_BY_DATABASE = "lease_lost"


class LeaseLost(Exception):
    """This worker no longer owns the claimed row (or must stop using it)."""

    def __init__(self, reason: str, operation: str = "unknown"):
        super().__init__(f"{reason} ({operation})")
        self.reason = reason
        self.operation = operation


class LeaseGuard(threading.Event):
    """A cancel event that also trips on the local lease deadline and the runner's cancel."""

    def __init__(
        self,
        lease_seconds: float,
        *,
        claimed_at: float,
        runner_cancel: EventLike | None = None,
    ):
        super().__init__()
        self._validity = lease_seconds * LOCAL_LEASE_FRACTION
        self._deadline = claimed_at + self._validity
        self._runner_cancel = runner_cancel
        self._reason_lock = threading.Lock()
        self.reason: str | None = None
        self.operation: str | None = None

    def renewed(self, started_at: float) -> None:
        """A renewal or token-checked write that began at ``started_at`` (monotonic) succeeded."""
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
        if self._runner_cancel is not None and self._runner_cancel.is_set():
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
            raise LeaseLost(self.reason or LOST_BY_DATABASE, self.operation or "unknown")
