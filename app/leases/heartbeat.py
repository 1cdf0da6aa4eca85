"""The one heartbeat: renew a claim in a thread until stopped (docs/architecture.md, leases).

``Heartbeat(renew, guard, interval=…)`` calls ``renew()`` every ``interval`` seconds
(≤ lease/3), each call in its own short transaction, independently of the work. What
``renew`` returns decides everything:

- ``True``: renewed; the guard's local deadline moves to (start of the call + lease);
- ``False``: the row is not ours any more; the guard is lost (``lease_lost``) and the
  heartbeat ends;
- ``None``: not renewed but not lost either (the owner's own transaction holds the row
  and extends the lease when it commits); nothing changes;
- an exception: database trouble; retried after ``RENEW_RETRY_SECONDS``. If no renewal
  is confirmed before the lease would expire, the guard's local deadline trips it
  (``lease_expired``).

So "lost" has one meaning for every user: the renewal said the lease is gone, or it
could not be confirmed before it expired. The work polls the guard and stops.
Lateness (renewal done minus scheduled time) is kept for benchmarks and events.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from app.leases.guard import LOST_BY_DATABASE, LeaseGuard
from app.observability import emit

RENEW_RETRY_SECONDS = 0.5


class Heartbeat:
    """Renews through ``renew`` every ``interval`` seconds in a thread until stopped.

    ``failed_event`` names the warning emitted when a renewal raises; ``on_lost`` runs
    once in the heartbeat's thread when the database says the claim is gone.
    """

    def __init__(
        self,
        renew: Callable[[], bool | None],
        guard: LeaseGuard,
        *,
        interval: float,
        name: str = "lease-heartbeat",
        failed_event: str = "LeaseHeartbeatFailed",
        event_fields: dict[str, object] | None = None,
        on_lost: Callable[[], None] | None = None,
    ):
        self.renew = renew
        self.guard = guard
        self.interval = interval
        self.failed_event = failed_event
        self.event_fields = dict(event_fields or {})
        self.on_lost = on_lost
        self.late_seconds: list[float] = []  # one entry per confirmed renewal
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

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

    def __enter__(self) -> Heartbeat:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        due = time.monotonic() + self.interval
        while not self._stop.wait(max(0.0, due - time.monotonic())):
            if self.guard.reason == LOST_BY_DATABASE:
                return  # the database already said no; a tripped local deadline still asks
            started = time.monotonic()
            try:
                owned = self.renew()
            except Exception as exc:  # noqa: BLE001 - database trouble: try again soon
                emit(
                    self.failed_event,
                    level=logging.WARNING,
                    error=f"{type(exc).__name__}: {exc}"[:300],
                    **self.event_fields,
                )
                due = time.monotonic() + min(self.interval, RENEW_RETRY_SECONDS)
                continue
            if owned is False:
                self.guard.lose(LOST_BY_DATABASE, "heartbeat")
                if self.on_lost is not None:
                    self.on_lost()
                return
            if owned:
                self.guard.renewed(started)
                self.late_seconds.append(max(0.0, time.monotonic() - due))
            due += self.interval
            if due < time.monotonic():
                due = time.monotonic() + self.interval  # paused past several beats: restart
