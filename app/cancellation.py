"""``EventLike``: the stop signal long-running work polls (a ``threading.Event`` or anything alike).

The runner hands every job a ``stopping`` and a ``cancelled`` signal (jobs/base.py); the
projection and export workers combine the runner's signal with their own lease deadline
(app/leases/guard.py). All of them only ask "is it set?" or wait on it, so the type is
this small protocol rather than ``threading.Event``, and tests may pass their own.
"""

from __future__ import annotations

from typing import Protocol


class EventLike(Protocol):
    def is_set(self) -> bool: ...
    def wait(self, timeout: float | None = None) -> bool: ...
