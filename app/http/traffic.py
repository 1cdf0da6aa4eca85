"""Traffic rollup routes: bearer-token ingest and the session-authenticated query (TRF-6, TRF-7).

``POST /api/traffic/rollups`` takes ``Authorization: Bearer <rollup token>``
(``[traffic] ingest_token`` / ``NETMAP_TRAFFIC_TOKEN``), compared in constant time; with
no token configured the route refuses every request. A batch is validated completely
before anything is written (400 names the row index and field) and upserted in one
transaction. ``GET /api/traffic/rollups`` filters by domain, granularity and a
``from``/``to`` range on the bucket start: a date means midnight in the business time
zone (as ``to``, the midnight ending that day: the day is included), a timestamp without
offset is read in that zone too. Rows have snake_case field names; ``names=camelCase``
answers with netmap 0.1's names (``bucketStart`` …) for readers not yet moved
(docs/upgrading.md)."""

from __future__ import annotations

import hashlib
import hmac
import re
from datetime import UTC, datetime, timedelta

from flask import Blueprint, jsonify, request

from app.cursors import bad_cursor
from app.errors import ValidationError
from app.http import context
from app.http.guards import require_bearer, require_user
from app.http.requests import decode_cursor, encode_cursor, json_body, page_limit
from app.observability import emit
from app.traffic import service as traffic_rollups
from app.traffic.business_time import BusinessCalendar
from app.traffic.rows import RowQuery, validate_rows, with_former_names

blueprint = Blueprint("traffic", __name__, url_prefix="/api/traffic")


def _rollup_token_matches(token: str) -> bool:
    expected = context.settings().traffic.ingest_token
    if not expected:
        return False
    # Comparing digests keeps the comparison constant-time whatever the lengths.
    return hmac.compare_digest(
        hashlib.sha256(token.encode()).digest(), hashlib.sha256(expected.encode()).digest()
    )


@blueprint.post("/rollups")
@require_bearer(_rollup_token_matches, realm="netmap-traffic")
def ingest_rollups():
    body = json_body(allow_nul=True)  # the row validator names index and field of a NUL
    records = validate_rows(
        body.get("rows"), max_rows=context.settings().traffic.max_rows_per_request
    )
    written = traffic_rollups.store_rollups(records)
    emit(
        "TrafficRollupsIngested",
        rows=len(records),
        written=written,
        domains=sorted({r.domain for r in records}),
    )
    return jsonify({"accepted": len(records)})


_BARE_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def instant_arg(name: str, calendar: BusinessCalendar) -> datetime | None:
    """A ``from``/``to`` query argument as a UTC instant (the console's traffic page reads
    its range with this too, so a range means the same on both)."""
    raw = request.args.get(name)
    if not raw:
        return None
    try:
        value = datetime.fromisoformat(raw)
        if name == "to" and _BARE_DATE.fullmatch(raw.strip()):
            # A date as the end includes that day, as `netmap traffic chart --to` does
            # (from=to=the same date was an empty range).
            value += timedelta(days=1)
        if value.tzinfo is None:
            value = value.replace(tzinfo=calendar.tz)
        # Edge dates (0001-01-01T00:00:00+14:00) parse but are no UTC instant.
        return value.astimezone(UTC)
    except (ValueError, OverflowError):
        raise ValidationError(
            f"{name} must be a date (2026-08-01) or an ISO 8601 timestamp "
            "(between years 1 and 9999 in UTC)",
            code="invalid_parameter",
            details={"parameter": name, "value": raw},
        ) from None


@blueprint.get("/rollups")
@require_user
def list_rollups():
    calendar = BusinessCalendar(context.settings().traffic.timezone)
    granularity = request.args.get("granularity") or None
    if granularity not in (None, "5m", "day"):
        raise ValidationError(
            "granularity must be 5m or day",
            code="invalid_parameter",
            details={"parameter": "granularity", "allowed": ["5m", "day"]},
        )
    names = request.args.get("names") or "snake_case"
    if names not in ("snake_case", "camelCase"):
        raise ValidationError(
            "names must be snake_case or camelCase",
            code="invalid_parameter",
            details={"parameter": "names", "allowed": ["snake_case", "camelCase"]},
        )
    start = instant_arg("from", calendar)
    end = instant_arg("to", calendar)
    if start and end and end < start:
        raise ValidationError(
            "to must not be before from", code="invalid_parameter", details={"parameter": "to"}
        )
    cursor = decode_cursor()
    after = None
    if cursor is not None:
        try:
            after = tuple(cursor["k"])
            if len(after) != 5 or not all(isinstance(part, str) for part in after):
                raise ValueError
        except (KeyError, TypeError, ValueError):
            raise bad_cursor() from None
    query = RowQuery(
        domain=request.args.get("domain") or None,
        granularity=granularity,
        start=start,
        end=end,
        limit=page_limit(default=1000, maximum=10000),
        after=after,  # type: ignore[arg-type]
    )
    items, next_key = traffic_rollups.read_rows(query)
    if names == "camelCase":
        items = [with_former_names(item) for item in items]
    return jsonify(
        {
            "items": items,
            "next_cursor": encode_cursor({"k": list(next_key)}) if next_key else None,
        }
    )
