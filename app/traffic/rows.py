"""Published rollup rows (``traffic_rollups``): validation, idempotent upsert, queries (TRF-2/7).

Rows have snake_case field names like every other route (``bucket_start``,
``total_requests`` …), from the runner's own rollup or from
``POST /api/traffic/rollups``. The camelCase names of netmap 0.1 (``bucketStart`` …)
are still accepted on ingest, so an nginx host running an older ``netmap traffic
rollup`` keeps publishing while the server is upgraded first (docs/upgrading.md);
``GET /api/traffic/rollups?names=camelCase`` answers with them for older readers.
``validate_rows`` checks every field and names
the row index and field of the first problem; nothing is written unless the
whole batch is valid. ``upsert_rows`` is idempotent: a row whose values equal
the stored ones is left untouched (``generated_at`` and ``updated_at`` stay), so
running the same window twice changes nothing. A frozen day row (its business
day is over) is only ever replaced by another frozen row: a stale, unfrozen
copy arriving late cannot undo a completed day.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.config import DOMAIN_NAME
from app.dbapi import copy_text
from app.errors import ValidationError
from app.sql_filters import Filters
from app.traffic.logline import STATUS_NAMES
from app.traffic.rollup_sql import ON_CONFLICT_UPDATE, ROLLUP_COLUMNS

MAX_BIGINT = (1 << 63) - 1
MAX_PATH_BYTES = 2100
_STATUS_COLUMNS = ("status_1xx", "status_2xx", "status_3xx", "status_4xx", "status_5xx")
STATUS_COLUMNS = (*_STATUS_COLUMNS, "status_other")


@dataclass(frozen=True)
class RollupRecord:
    domain: str
    granularity: str
    bucket_start: datetime
    bucket_end: datetime
    business_date: date
    method: str
    path: str
    response_bytes: int
    request_bytes: int | None
    request_bytes_known_count: int
    total_requests: int
    status_counts: tuple[int, int, int, int, int, int]
    source_server: str
    generated_at: datetime
    frozen: bool

    @property
    def key(self) -> tuple[str, str, datetime, str, str]:
        return (self.domain, self.granularity, self.bucket_start, self.method, self.path)


class _RowProblem(Exception):
    def __init__(self, field: str, reason: str):
        super().__init__(reason)
        self.field = field
        self.reason = reason


def _text(row: dict, name: str, *, max_length: int, allow_empty: bool = False) -> str:
    value = row.get(name)
    if not isinstance(value, str):
        raise _RowProblem(name, "must be a string")
    if (not value and not allow_empty) or len(value.encode()) > max_length or "\x00" in value:
        raise _RowProblem(name, f"must be 1 to {max_length} bytes of text without NUL")
    return value


def _count(row: dict, name: str) -> int:
    value = row.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_BIGINT:
        raise _RowProblem(name, "must be a non-negative integer")
    return value


@functools.lru_cache(maxsize=4096)
def _parse_instant(value: str) -> datetime | None:
    # A batch repeats few distinct instants (bucket bounds, generatedAt): parse each once.
    # Edge dates (0001-01-01 with a positive offset, 9999-12-31 with a negative one) parse
    # but overflow when moved to UTC: the same "not a usable timestamp" answer for both.
    try:
        parsed = datetime.fromisoformat(value)
        return parsed if parsed.tzinfo is None else parsed.astimezone(UTC)
    except (ValueError, OverflowError):
        return None


def _instant(row: dict, name: str) -> datetime:
    value = row.get(name)
    if not isinstance(value, str):
        raise _RowProblem(name, "must be an ISO 8601 timestamp string")
    parsed = _parse_instant(value)
    if parsed is None:
        raise _RowProblem(name, "must be an ISO 8601 timestamp such as 2026-08-01T02:00:00Z")
    if parsed.tzinfo is None:
        raise _RowProblem(name, "must carry a UTC offset or Z")
    return parsed


# netmap 0.1's camelCase field names → the snake_case names rows have now.
FORMER_NAMES = {
    "bucketStart": "bucket_start",
    "bucketEnd": "bucket_end",
    "businessDate": "business_date",
    "responseBytes": "response_bytes",
    "requestBytes": "request_bytes",
    "requestBytesKnownCount": "request_bytes_known_count",
    "totalRequests": "total_requests",
    "statusCounts": "status_counts",
    "sourceServer": "source_server",
    "generatedAt": "generated_at",
}
_FORMER_BY_NAME = {name: former for former, name in FORMER_NAMES.items()}


def with_former_names(row: dict[str, Any]) -> dict[str, Any]:
    """A row under netmap 0.1's camelCase names (``?names=camelCase``)."""
    return {_FORMER_BY_NAME.get(name, name): value for name, value in row.items()}


def _snake_case_row(row: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The row under snake_case names, and the name each field was sent under."""
    if not any(name in FORMER_NAMES for name in row):
        return row, {}
    renamed: dict[str, Any] = {}
    sent: dict[str, str] = {}
    for name, value in row.items():
        current = FORMER_NAMES.get(name, name)
        if current in renamed:
            raise _RowProblem(current, f"sent twice, as {current} and {_FORMER_BY_NAME[current]}")
        renamed[current] = value
        sent[current] = name
    return renamed, sent


def _record(row: Any) -> RollupRecord:
    if not isinstance(row, dict):
        raise _RowProblem("row", "must be an object")
    row, sent = _snake_case_row(row)
    try:
        return _checked_record(row)
    except _RowProblem as problem:
        # Name the field as the client sent it.
        raise _RowProblem(sent.get(problem.field, problem.field), problem.reason) from None


def _checked_record(row: dict[str, Any]) -> RollupRecord:
    granularity = row.get("granularity")
    if granularity not in ("5m", "day"):
        raise _RowProblem("granularity", "must be 5m or day")
    domain = _text(row, "domain", max_length=253)
    if not DOMAIN_NAME.match(domain):
        raise _RowProblem("domain", "must be a host name")
    method = _text(row, "method", max_length=32)
    path = _text(row, "path", max_length=MAX_PATH_BYTES)
    start = _instant(row, "bucket_start")
    end = _instant(row, "bucket_end")
    length = (end - start).total_seconds()
    if granularity == "5m":
        if start.timestamp() % 300 or length != 300:
            raise _RowProblem(
                "bucket_end", "a 5m bucket starts on a 5-minute boundary and lasts 300 s"
            )
    elif not 23 * 3600 <= length <= 25 * 3600:
        raise _RowProblem("bucket_end", "a day bucket lasts one business day (23 to 25 hours)")
    raw_date = row.get("business_date")
    try:
        business_date = date.fromisoformat(raw_date) if isinstance(raw_date, str) else None
    except ValueError:
        business_date = None
    if business_date is None:
        raise _RowProblem("business_date", "must be a date such as 2026-08-01")
    if abs((business_date - start.date()).days) > 1:
        raise _RowProblem("business_date", "must be the business date of bucket_start")
    response_bytes = _count(row, "response_bytes")
    known = _count(row, "request_bytes_known_count")
    total = _count(row, "total_requests")
    request_bytes = row.get("request_bytes")
    if request_bytes is not None:
        request_bytes = _count(row, "request_bytes")
    if known > total:
        raise _RowProblem("request_bytes_known_count", "cannot exceed total_requests")
    if known == 0:
        if request_bytes:
            raise _RowProblem("request_bytes", "must be null when request_bytes_known_count is 0")
        request_bytes = None
    elif request_bytes is None:
        raise _RowProblem("request_bytes", "must be an integer when request_bytes_known_count > 0")
    counts = row.get("status_counts")
    if not isinstance(counts, dict) or not set(counts) <= set(STATUS_NAMES):
        raise _RowProblem(
            "status_counts", f"must be an object with keys among {list(STATUS_NAMES)}"
        )
    statuses = []
    for name in STATUS_NAMES:
        value = counts.get(name, 0)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_BIGINT:
            raise _RowProblem("status_counts", f"{name} must be a non-negative integer")
        statuses.append(value)
    if sum(statuses) != total:
        raise _RowProblem("status_counts", "must add up to total_requests")
    source = row.get("source_server", "")
    if source is None:
        source = ""
    if not isinstance(source, str) or len(source) > 255 or "\x00" in source:
        raise _RowProblem("source_server", "must be a string of at most 255 characters")
    generated_at = _instant(row, "generated_at")
    frozen = row.get("frozen", False)
    if not isinstance(frozen, bool):
        raise _RowProblem("frozen", "must be true or false")
    return RollupRecord(
        domain=domain,
        granularity=granularity,
        bucket_start=start,
        bucket_end=end,
        business_date=business_date,
        method=method,
        path=path,
        response_bytes=response_bytes,
        request_bytes=request_bytes,
        request_bytes_known_count=known,
        total_requests=total,
        status_counts=tuple(statuses),  # type: ignore[arg-type]
        source_server=source,
        generated_at=generated_at,
        frozen=frozen,
    )


def validate_rows(rows: Any, *, max_rows: int) -> list[RollupRecord]:
    """All rows as records, or a ValidationError naming the first bad row and field."""
    if not isinstance(rows, list):
        raise ValidationError("rows must be a list", code="invalid_rows", details={"field": "rows"})
    if len(rows) > max_rows:
        raise ValidationError(
            f"at most {max_rows} rows per request",
            code="too_many_rows",
            details={"field": "rows", "limit": max_rows, "count": len(rows)},
        )
    records: list[RollupRecord] = []
    seen: set[tuple] = set()
    for index, row in enumerate(rows):
        try:
            record = _record(row)
        except _RowProblem as problem:
            raise ValidationError(
                f"rows[{index}].{problem.field}: {problem.reason}",
                code="invalid_row",
                details={"index": index, "field": problem.field, "reason": problem.reason},
            ) from None
        if record.key in seen:
            raise ValidationError(
                f"rows[{index}] repeats the key of an earlier row in this request",
                code="invalid_row",
                details={"index": index, "field": "bucket_start", "reason": "duplicate key"},
            )
        seen.add(record.key)
        records.append(record)
    return records


_INCOMING = "traffic_rollups_incoming"
# The batch is copied into a temporary table and merged by one statement that also
# empties it (rows are absolute sums: an upsert by key is idempotent).
_MERGE_INCOMING = sa.text(
    f"""
    WITH incoming AS (DELETE FROM {_INCOMING} RETURNING *)
    INSERT INTO traffic_rollups AS t ({ROLLUP_COLUMNS})
    SELECT {ROLLUP_COLUMNS} FROM incoming
    {ON_CONFLICT_UPDATE}
    """  # noqa: S608 - table names and column lists are module constants; values are bound
)


def upsert_rows(conn: Connection, records: Sequence[RollupRecord]) -> int:
    """Insert or update rows (``COPY`` + one merge); returns how many were actually written."""
    if not records:
        return 0
    buffer = io.StringIO()
    write = buffer.write
    stamps: dict[datetime, str] = {}

    def stamp(value: datetime) -> str:
        text = stamps.get(value)
        if text is None:
            text = stamps[value] = value.isoformat()
        return text

    for r in records:
        s1, s2, s3, s4, s5, so = r.status_counts
        request = "\\N" if r.request_bytes is None else r.request_bytes
        write(
            f"{copy_text(r.domain)}\t{r.granularity}\t{stamp(r.bucket_start)}\t"
            f"{copy_text(r.method)}\t{copy_text(r.path)}\t{stamp(r.bucket_end)}\t"
            f"{r.business_date.isoformat()}\t{r.response_bytes}\t{request}\t"
            f"{r.request_bytes_known_count}\t{r.total_requests}\t{s1}\t{s2}\t{s3}\t{s4}\t"
            f"{s5}\t{so}\t{copy_text(r.source_server)}\t{stamp(r.generated_at)}\t"
            f"{'t' if r.frozen else 'f'}\n"
        )
    buffer.seek(0)
    cursor = conn.connection.cursor()  # the DBAPI cursor, inside this transaction
    try:
        cursor.execute(
            f"CREATE TEMP TABLE IF NOT EXISTS {_INCOMING} "
            "(LIKE traffic_rollups INCLUDING DEFAULTS) ON COMMIT DELETE ROWS"
        )
        cursor.copy_expert(
            f"COPY {_INCOMING} ({' '.join(ROLLUP_COLUMNS.split())}) FROM STDIN", buffer
        )
    finally:
        cursor.close()
    return conn.execute(_MERGE_INCOMING).rowcount


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def row_from_db(values: Any) -> dict[str, Any]:
    generated = values.generated_at.astimezone(UTC).isoformat().replace("+00:00", "Z")
    return {
        "bucket_start": _iso(values.bucket_start),
        "bucket_end": _iso(values.bucket_end),
        "business_date": values.business_date.isoformat(),
        "granularity": values.granularity,
        "domain": values.domain,
        "method": values.method,
        "path": values.path,
        "response_bytes": values.response_bytes,
        "request_bytes": values.request_bytes,
        "request_bytes_known_count": values.request_bytes_known_count,
        "total_requests": values.total_requests,
        "status_counts": {
            name: getattr(values, column)
            for name, column in zip(STATUS_NAMES, STATUS_COLUMNS, strict=True)
        },
        "source_server": values.source_server,
        "generated_at": generated,
        "frozen": values.frozen,
    }


@dataclass(frozen=True)
class RowQuery:
    domain: str | None = None
    granularity: str | None = None
    start: datetime | None = None  # bucket_start >= start
    end: datetime | None = None  # bucket_start < end
    limit: int = 1000
    after: tuple[str, str, str, str, str] | None = (
        None  # keyset: start iso, gran, domain, method, path
    )


def query_rows(conn: Connection, query: RowQuery) -> tuple[list[dict[str, Any]], tuple | None]:
    """Rows in (bucket_start, granularity, domain, method, path) order, with a keyset cursor."""
    filters = Filters(limit=query.limit + 1)
    if query.domain:
        filters.add("domain = :domain", domain=query.domain)
    if query.granularity:
        filters.add("granularity = :granularity", granularity=query.granularity)
    if query.start:
        filters.add("bucket_start >= :start", start=query.start)
    if query.end:
        filters.add("bucket_start < :end", end=query.end)
    if query.after:
        a_start, a_gran, a_domain, a_method, a_path = query.after
        filters.add(
            "(bucket_start, granularity, domain, method, path) > "
            "(CAST(:a_start AS timestamptz), :a_gran, :a_domain, :a_method, :a_path)",
            a_start=a_start,
            a_gran=a_gran,
            a_domain=a_domain,
            a_method=a_method,
            a_path=a_path,
        )
    result = conn.execute(
        sa.text(
            f"""
            SELECT * FROM traffic_rollups {filters.where()}
            ORDER BY bucket_start, granularity, domain, method, path
            LIMIT :limit
            """  # noqa: S608 - fixed WHERE fragments; values are bound
        ),
        filters.params,
    ).all()
    items = [row_from_db(r) for r in result[: query.limit]]
    cursor = None
    if len(result) > query.limit:
        last = result[query.limit - 1]
        cursor = (
            last.bucket_start.isoformat(),
            last.granularity,
            last.domain,
            last.method,
            last.path,
        )
    return items, cursor


def series(
    conn: Connection, *, domain: str, granularity: str, start: datetime, end: datetime
) -> list[tuple[datetime, int, int, int]]:
    """(bucket start, requests, response bytes, request bytes) per bucket, for charts."""
    result = conn.execute(
        sa.text(
            """
            SELECT bucket_start, sum(total_requests) AS requests,
                   sum(response_bytes) AS response_bytes,
                   COALESCE(sum(request_bytes), 0) AS request_bytes
              FROM traffic_rollups
             WHERE domain = :domain AND granularity = :granularity
               AND bucket_start >= :start AND bucket_start < :end
             GROUP BY bucket_start ORDER BY bucket_start
            """
        ),
        {"domain": domain, "granularity": granularity, "start": start, "end": end},
    ).all()
    return [
        (r.bucket_start, int(r.requests), int(r.response_bytes), int(r.request_bytes))
        for r in result
    ]


def domains(conn: Connection, *, limit: int) -> tuple[list[str], bool]:
    """Distinct domains with rollups, in order, at most ``limit`` (and whether there are more).

    A skip scan over the primary key's leading column: one index probe per domain,
    so the cost follows the number of domains listed, not the number of rows.
    """
    result = conn.execute(
        sa.text(
            """
            WITH RECURSIVE d(domain) AS (
                (SELECT domain FROM traffic_rollups ORDER BY domain LIMIT 1)
                UNION ALL
                SELECT (SELECT t.domain FROM traffic_rollups t WHERE t.domain > d.domain
                         ORDER BY t.domain LIMIT 1)
                  FROM d WHERE d.domain IS NOT NULL
            )
            SELECT domain FROM d WHERE domain IS NOT NULL LIMIT :limit
            """
        ),
        {"limit": limit + 1},
    ).scalars()
    names = list(result)
    return names[:limit], len(names) > limit


def latest_bucket(conn: Connection, *, domain: str, granularity: str) -> datetime | None:
    """The newest bucket start of one domain and granularity (one backward index probe)."""
    return conn.execute(
        sa.text(
            """
            SELECT bucket_start FROM traffic_rollups
             WHERE domain = :domain AND granularity = :granularity
             ORDER BY bucket_start DESC LIMIT 1
            """
        ),
        {"domain": domain, "granularity": granularity},
    ).scalar()


def earliest_bucket(
    conn: Connection, *, domain: str, granularity: str, since: datetime
) -> datetime | None:
    """The oldest bucket start at or after ``since`` (one forward index probe)."""
    return conn.execute(
        sa.text(
            """
            SELECT bucket_start FROM traffic_rollups
             WHERE domain = :domain AND granularity = :granularity AND bucket_start >= :since
             ORDER BY bucket_start LIMIT 1
            """
        ),
        {"domain": domain, "granularity": granularity, "since": since},
    ).scalar()


def bounded_series(
    conn: Connection,
    *,
    domain: str,
    granularity: str,
    start: datetime,
    end: datetime,
    max_rows: int,
) -> tuple[list[tuple[datetime, int, int, int]], datetime | None]:
    """``series`` reading at most ``max_rows`` (+1) rollup rows (a busy domain has a row per path
    per bucket), in primary-key order so the scan stops there. When the cap is reached the
    last, possibly incomplete bucket is left out and its start is returned as the point
    where the series was cut; otherwise the second value is None."""
    result = conn.execute(
        sa.text(
            """
            SELECT bucket_start, sum(total_requests) AS requests,
                   sum(response_bytes) AS response_bytes,
                   COALESCE(sum(request_bytes), 0) AS request_bytes, count(*) AS rows
              FROM (SELECT bucket_start, total_requests, response_bytes, request_bytes
                      FROM traffic_rollups
                     WHERE domain = :domain AND granularity = :granularity
                       AND bucket_start >= :start AND bucket_start < :end
                     ORDER BY bucket_start LIMIT :max_rows + 1) AS capped
             GROUP BY bucket_start ORDER BY bucket_start
            """
        ),
        {
            "domain": domain,
            "granularity": granularity,
            "start": start,
            "end": end,
            "max_rows": max_rows,
        },
    ).all()
    cut = None
    if sum(r.rows for r in result) > max_rows:
        cut = result[-1].bucket_start
        result = result[:-1]
    points = [
        (r.bucket_start, int(r.requests), int(r.response_bytes), int(r.request_bytes))
        for r in result
    ]
    return points, cut
