"""The planner's statistics, as the search reads them to choose how to spell a lookup.

``postgres_grams`` reads which five-character pieces nearly every distinct text holds,
``postgres_text_share`` how many of a view's rows hold a free text; both from what
``ANALYZE`` keeps (``pg_stats``, ``pg_stats_ext_exprs``). Reading those views costs a
couple of milliseconds (they check privileges row by row), more than the lookups they
tune, so each process keeps what it read for ``STATISTICS_SECONDS``: statistics change
only when a table is analysed, and stale ones can cost a search time, never an answer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy.engine import Connection

# How long a process trusts the statistics it read.
STATISTICS_SECONDS = 300.0

T = TypeVar("T")

_lock = threading.Lock()
# By database (the engine's URL) and name: when read, and what was read.
_read: dict[tuple[Any, str], tuple[float, Any]] = {}


def cached(conn: Connection, name: str, read: Callable[[Connection], T]) -> T:
    """``read(conn)``, or what it gave for ``name`` in this database within the last
    ``STATISTICS_SECONDS``."""
    key = (conn.engine.url, name)
    now = time.monotonic()
    with _lock:
        held = _read.get(key)
    if held is not None and now - held[0] < STATISTICS_SECONDS:
        return held[1]
    value = read(conn)
    with _lock:
        _read[key] = (now, value)
    return value
