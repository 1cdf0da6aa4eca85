"""Upload slots: a web worker runs ``[server] upload_concurrency`` scanner uploads at
once (default 1); another upload waits for a slot, at most ``[server]
upload_wait_seconds`` (default 2), and then runs without one.

Why: an upload is CPU work from start to end (decoding, validating, building and
writing rows; its database half runs in PostgreSQL on the same cores). Two uploads in
one worker share one interpreter lock, so running them side by side does not finish
them sooner; it only puts more threads (and more busy database sessions) in the
operating system's run queue, where a user's read waits its turn behind them.
Measured with 3-minute `netmap bench soak` runs on a 2-core machine (4 scanners,
2 readers): with one slot per worker, results pages answered at a p95 of 155-205 ms
against 263-289 ms without slots, and asset searches at 134-153 ms against
168-222 ms, while ingest held at 10.7-10.8k observations/s in every minute (12.8k
falling to 10.8k without). Four scanners through `netmap bench upload --http
--clients 4` filled at least as fast with slots (15.3k against 15.0k observations/s
in one pair of runs, 14.8k against 12.6k in another).
Holding the slot only around the validation and document building, not the writes,
did not help reads (p95 222-283 ms): the writes' share of the CPU is as large.

Why the wait is bounded rather than a queue: an upload can sit in a slow store call
(a store timing out, a lock wait) while holding its slot. After the wait, the next
upload runs anyway, so one stuck request delays the others by at most
``upload_wait_seconds`` and never refuses them; under a load the slots cannot absorb,
uploads simply run side by side as they would without slots. A waiting upload holds
its gunicorn thread but no database connection. ``netmap_upload_admission_wait_seconds``
counts every wait by outcome (``slot`` or ``no_slot``).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

from app.observability import UPLOAD_ADMISSION_SECONDS


class UploadGate:
    """The upload slots of one process (a semaphore; one per app)."""

    def __init__(self, slots: int, wait_seconds: float):
        self.slots = slots
        self.wait_seconds = wait_seconds
        self._free = threading.BoundedSemaphore(slots)

    @contextlib.contextmanager
    def slot(self) -> Iterator[bool]:
        """Run the block in a slot when one frees up in time, else without; yields which."""
        started = time.perf_counter()
        held = self._free.acquire(timeout=self.wait_seconds)
        UPLOAD_ADMISSION_SECONDS.labels("slot" if held else "no_slot").observe(
            time.perf_counter() - started
        )
        try:
            yield held
        finally:
            if held:
                self._free.release()
