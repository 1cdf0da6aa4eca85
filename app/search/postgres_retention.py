"""Dropping whole months of raw facts from the PostgreSQL store (``[search]
facts_retention_months``; docs/architecture.md "Fact retention").

Facts live in monthly partitions of ``search_facts`` and the exact counters count them
per (execution, month, kind) in ``search_execution_fact_counts``. A month past the
retention goes in one short transaction, under the lock every partition DDL takes: its
counter rows are deleted and its partition is dropped whole (no row-by-row delete, no
bloat left behind), so a count over the remaining months stays exactly the rows that
remain. Execution endpoints, current assets and the analysis's history are not facts
and stay.
"""

from __future__ import annotations

import re
from datetime import date, datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.observability import emit
from app.search.postgres_schema import FACT_COUNTS_TABLE, FACTS_TABLE

_PARTITION = re.compile(rf"^{FACTS_TABLE}_y(\d{{4}})m(\d{{2}})$")


def months_to_keep_from(now: datetime, months: int) -> date:
    """The first day of the oldest month kept: the current month and the ``months`` - 1
    before it stay, anything older goes."""
    index = now.year * 12 + (now.month - 1) - (months - 1)
    return date(index // 12, index % 12 + 1, 1)


def fact_partitions(conn: Connection) -> list[tuple[str, date]]:
    """Every monthly fact partition and its month, oldest first."""
    names = conn.execute(
        sa.text(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = CAST(:parent AS regclass)"
        ),
        {"parent": FACTS_TABLE},
    ).scalars()
    found = []
    for name in names:
        if match := _PARTITION.match(name):
            found.append((name, date(int(match[1]), int(match[2]), 1)))
    return sorted(found, key=lambda item: item[1])


def drop_month(conn: Connection, name: str, month: date) -> int:
    """Drop one month's partition and its counter rows (caller's transaction); returns
    how many counter rows went."""
    conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext('netmap:search_facts'))"))
    counters = conn.execute(
        sa.text(f"DELETE FROM {FACT_COUNTS_TABLE} WHERE month = :month"),  # noqa: S608 - constant
        {"month": month},
    ).rowcount
    # The name comes from the catalogue and matched the partition pattern above.
    conn.execute(sa.text(f'DROP TABLE IF EXISTS "{name}"'))
    emit("SearchFactMonthDropped", partition=name, month=month.isoformat(), counters=counters)
    return counters
