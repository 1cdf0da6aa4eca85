"""Progress lines on stderr for long benchmark and CLI work (at most one every ``interval`` s)."""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, label: str, total: int | None = None, interval: float = 1.0):
        self.label, self.total, self.interval = label, total, interval
        self.done = 0
        self.started = time.monotonic()
        self._last = 0.0

    def advance(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if now - self._last >= self.interval:
            self._last = now
            self._print(now)

    def finish(self) -> None:
        self._print(time.monotonic(), final=True)

    def _print(self, now: float, final: bool = False) -> None:
        elapsed = max(now - self.started, 1e-9)
        rate = self.done / elapsed
        of = f"/{self.total}" if self.total else ""
        state = "done" if final else "…"
        print(
            f"[{self.label}] {self.done}{of} {state} ({rate:,.0f}/s, {elapsed:.1f}s)",
            file=sys.stderr,
            flush=True,
        )
