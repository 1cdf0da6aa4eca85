"""Where a benchmark phase's work goes, statement by statement: ``pg_stat_statements``
read before and after the phase (the scratch server preloads it).

CPU per row says *that* a write grew with the database; the buffers each statement
touched per call say *where*: an index descent that gained a level touches one more page
per row in that index, a plan that changed reads many more. The counters are the
server's own, so the figures do not depend on the machine's load.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

_COUNTERS = """
    SELECT queryid, min(query) AS query, sum(calls) AS calls, sum(rows) AS rows,
           sum(shared_blks_hit + shared_blks_read) AS buffers,
           sum(shared_blks_read) AS read, sum(shared_blks_dirtied) AS dirtied,
           sum(total_exec_time) AS exec_ms, sum(wal_records) AS wal_records
      FROM pg_stat_statements
     WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
     GROUP BY queryid
"""
_FIELDS = ("calls", "rows", "buffers", "read", "dirtied", "exec_ms", "wal_records")
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class Counters:
    query: str
    calls: float
    rows: float
    buffers: float
    read: float
    dirtied: float
    exec_ms: float
    wal_records: float


def read_counters(conn) -> dict[int, Counters] | None:
    """Every statement's cumulative counters in this database, by query id; None when
    the extension is not there to read (the phase then reports no statements)."""
    installed = conn.execute(
        sa.text("SELECT 1 FROM pg_extension WHERE extname = 'pg_stat_statements'")
    ).first()
    if installed is None:
        return None
    return {
        int(row.queryid): Counters(
            _SPACE.sub(" ", row.query or "").strip(),
            *(float(getattr(row, name) or 0) for name in _FIELDS),
        )
        for row in conn.execute(sa.text(_COUNTERS))
        if row.queryid is not None
    }


def phase_statements(
    before: dict[int, Counters] | None,
    after: dict[int, Counters] | None,
    endpoints: int,
    *,
    top: int = 5,
    query_chars: int = 80,
) -> dict[str, Any] | None:
    """What the statements run between two readings did, per endpoint of the phase, and
    the ``top`` statements by buffers touched, each per call."""
    if before is None or after is None:
        return None
    spent: list[tuple[str, dict[str, float]]] = []
    for queryid, now in after.items():
        then = before.get(queryid)
        delta = {
            name: getattr(now, name) - (getattr(then, name) if then else 0.0) for name in _FIELDS
        }
        if delta["calls"] > 0:
            spent.append((now.query, delta))
    spent.sort(key=lambda item: -item[1]["buffers"])
    total = {name: sum(delta[name] for _, delta in spent) for name in _FIELDS}
    return {
        "statements": len(spent),
        "buffers_per_endpoint": round(total["buffers"] / endpoints, 2),
        "read_per_endpoint": round(total["read"] / endpoints, 3),
        "dirtied_per_endpoint": round(total["dirtied"] / endpoints, 3),
        "wal_records_per_endpoint": round(total["wal_records"] / endpoints, 2),
        "top": [
            {
                "query": query[:query_chars],
                "calls": int(delta["calls"]),
                "rows_per_call": round(delta["rows"] / delta["calls"], 1),
                "buffers_per_call": round(delta["buffers"] / delta["calls"], 1),
                "read_per_call": round(delta["read"] / delta["calls"], 2),
                "exec_ms_per_call": round(delta["exec_ms"] / delta["calls"], 3),
            }
            for query, delta in spent[:top]
        ],
    }
