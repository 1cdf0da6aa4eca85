"""Traffic rollups as the ingest API, the row API and the console chart use them, one
short transaction per call (docs/architecture.md, rule: services own transactions).
The connection-taking queries in ``rows`` stay for the collectors' sinks, which
write in their own transactions.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from app.db import transaction
from app.traffic import rows
from app.traffic.rows import RollupRecord, RowQuery


def store_rollups(records: Sequence[RollupRecord]) -> int:
    """Upsert validated rollup rows; returns how many rows were written."""
    with transaction() as conn:
        return rows.upsert_rows(conn, records)


def read_rows(query: RowQuery) -> tuple[list[dict[str, Any]], tuple | None]:
    """One keyset page of rollup rows and the key to continue after (None at the end)."""
    with transaction() as conn:
        return rows.query_rows(conn, query)


def list_domains(*, limit: int) -> tuple[list[str], bool]:
    """Domains with rollups, in name order, at most ``limit``; and whether there are more."""
    with transaction() as conn:
        return rows.domains(conn, limit=limit)


def default_range(
    *, domain: str, granularity: str, span: timedelta, min_span: timedelta, bucket: timedelta
) -> tuple[datetime, datetime]:
    """No range given: up to the newest bucket, from the first one within ``span`` (at
    least ``min_span``), so a short history fills the chart."""
    with transaction() as conn:
        latest = rows.latest_bucket(conn, domain=domain, granularity=granularity)
        end = (latest + bucket) if latest else datetime.now(UTC)
        start = end - span
        if latest is not None:
            first = rows.earliest_bucket(conn, domain=domain, granularity=granularity, since=start)
            if first is not None:
                start = min(max(start, first), end - min_span)
    return start, end


def bounded_series(
    *, domain: str, granularity: str, start: datetime, end: datetime, max_rows: int
) -> tuple[list[tuple[datetime, int, int, int]], datetime | None]:
    """The chart series of one domain (see ``rows.bounded_series`` for the row cap)."""
    with transaction() as conn:
        return rows.bounded_series(
            conn,
            domain=domain,
            granularity=granularity,
            start=start,
            end=end,
            max_rows=max_rows,
        )
