"""Where a benchmark phase's work goes, statement by statement: the server's
``pg_stat_statements`` counters (read by ``app.ops.slow_sql``; the scratch server
preloads the extension) before and after the phase.

CPU per row says *that* a write grew with the database; the buffers each statement
touched per call say *where*: an index descent that gained a level touches one more page
per row in that index, a plan that changed reads many more. The counters are the
server's own, so the figures do not depend on the machine's load.
"""

from __future__ import annotations

from typing import Any

from app.ops.slow_sql import read_statements

# The counters a phase is measured by (``read_statements``' keys).
FIELDS = (
    "calls", "rows", "shared_blocks", "read_blocks", "dirtied_blocks", "total_ms", "wal_records",
)  # fmt: skip
# pg_stat_statements keeps 5,000 statements by default: read them all, so a statement
# cannot drop out of one reading and distort the difference.
_ALL_STATEMENTS = 5000
# The reading's own statements, which read the extension's view and its reset time: the
# reading before a phase would otherwise count in it. Its lookup of the extension's
# schema (``app.db.extension_schema``) is left counted: the product runs the same
# statement (the warming job's ``pg_prewarm``), and a phase must not hide it.
_READING_ITS_OWN = "pg_stat_statements"

Counters = dict[str, dict[str, Any]]


def read_counters() -> Counters | None:
    """Every statement's cumulative counters in this database by query id (summed over
    the roles that ran it); None when they cannot be read (the phase then reports no
    statements, rather than zeros)."""
    reading = read_statements(limit=_ALL_STATEMENTS)
    if reading.status != "ok":
        return None
    counters: Counters = {}
    for statement in reading.statements:
        if _READING_ITS_OWN in statement["query"]:
            continue
        summed = counters.setdefault(
            statement["queryid"],
            {"query": " ".join(statement["query"].split()), **dict.fromkeys(FIELDS, 0)},
        )
        for name in FIELDS:
            summed[name] += statement[name]
    return counters


def phase_statements(
    before: Counters | None,
    after: Counters | None,
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
        then = before.get(queryid, {})
        delta = {name: now[name] - then.get(name, 0) for name in FIELDS}
        if delta["calls"] > 0:
            spent.append((now["query"], delta))
    spent.sort(key=lambda item: -item[1]["shared_blocks"])
    total = {name: sum(delta[name] for _, delta in spent) for name in FIELDS}
    return {
        "statements": len(spent),
        "buffers_per_endpoint": round(total["shared_blocks"] / endpoints, 2),
        "read_per_endpoint": round(total["read_blocks"] / endpoints, 3),
        "dirtied_per_endpoint": round(total["dirtied_blocks"] / endpoints, 3),
        "wal_records_per_endpoint": round(total["wal_records"] / endpoints, 2),
        # Every statement's time in the server, not only the top ones': a search's
        # cheap statements (its pieces cut, its statistics read) add up too.
        "exec_ms_per_endpoint": round(total["total_ms"] / endpoints, 3),
        "top": [
            {
                "query": query[:query_chars],
                "calls": int(delta["calls"]),
                "rows_per_call": round(delta["rows"] / delta["calls"], 1),
                "buffers_per_call": round(delta["shared_blocks"] / delta["calls"], 1),
                "read_per_call": round(delta["read_blocks"] / delta["calls"], 2),
                "exec_ms_per_call": round(delta["total_ms"] / delta["calls"], 3),
            }
            for query, delta in spent[:top]
        ],
    }
