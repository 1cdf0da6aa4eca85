"""The traffic page: a domain's rollups as a server-side SVG chart (TRF-7, WEB-11).

Scoping is the traffic API's: ``GET /api/traffic/rollups`` is open to every signed-in
user (rollups belong to the site, not to a user), so this page is too. The range is read
by the API's own ``from``/``to`` parser (a date is midnight in the business time zone;
as ``to``, the day is included) and is bounded: at most three days of 5-minute buckets
or 400 days of day buckets, so a page view aggregates a fixed number of buckets through
the primary key's (domain, granularity, bucket_start) range, whatever the table holds,
and reads at most ``MAX_ROWS`` rollup rows (one per path and bucket): past that the
chart stops at the last complete bucket and says so. Without a range the page shows the
last day (5-minute buckets) or month (day buckets) up to the domain's newest bucket,
starting at its first bucket when that is later, and never less than an hour (a week of
days): a domain with one bucket so far gets a chart of that bucket, not a day-wide empty
axis. The domain list is a skip scan capped at ``MAX_DOMAINS``. A bad argument shows the
form again with the message (400)."""

from __future__ import annotations

from datetime import datetime, timedelta

from flask import render_template, request

from app.errors import ValidationError
from app.http import context
from app.http.traffic import instant_arg
from app.traffic import service as traffic_rollups
from app.traffic.business_time import BusinessCalendar
from app.web import blueprint
from app.web.access import page_user
from app.web.traffic_chart import build_chart, format_bytes

MAX_DOMAINS = 500
BUCKET = {"5m": timedelta(minutes=5), "day": timedelta(days=1)}
DEFAULT_SPAN = {"5m": timedelta(days=1), "day": timedelta(days=31)}
MIN_DEFAULT_SPAN = {"5m": timedelta(hours=1), "day": timedelta(days=7)}
MAX_SPAN = {"5m": timedelta(days=3), "day": timedelta(days=400)}
MAX_DOMAIN_CHARS = 253
# Rollup rows one page view aggregates at most: a busy domain has one row per path per
# bucket, so the bucket range alone does not bound the work.
MAX_ROWS = 100_000


def _granularity() -> str:
    value = request.args.get("granularity") or "5m"
    if value not in BUCKET:
        raise ValidationError(
            "granularity must be 5m or day",
            code="invalid_parameter",
            details={"parameter": "granularity", "allowed": list(BUCKET)},
        )
    return value


def _range(
    start: datetime | None, end: datetime | None, granularity: str
) -> tuple[datetime, datetime]:
    span = DEFAULT_SPAN[granularity]
    try:
        if start is None:
            start = end - span  # type: ignore[operator]
        if end is None:
            end = start + span
    except OverflowError:  # one bound given at the edge of the calendar (year 1 or 9999)
        raise ValidationError(
            "give both from and to this close to year 1 or 9999",
            code="invalid_parameter",
            details={"parameter": "from" if start is None else "to"},
        ) from None
    if end <= start:
        raise ValidationError(
            "to must be after from", code="invalid_parameter", details={"parameter": "to"}
        )
    if end - start > MAX_SPAN[granularity]:
        days = MAX_SPAN[granularity].days
        raise ValidationError(
            f"a {granularity} chart covers at most {days} days; narrow from/to",
            code="invalid_parameter",
            details={"parameter": "to", "max_days": days},
        )
    return start, end


@blueprint.get("/traffic")
@page_user
def traffic():
    settings = context.settings()
    calendar = BusinessCalendar(settings.traffic.timezone)
    values = {name: request.args.get(name, "") for name in ("domain", "granularity", "from", "to")}
    error = None
    chart = None
    points: list = []
    cut = None
    domains, more_domains = traffic_rollups.list_domains(limit=MAX_DOMAINS)
    try:
        granularity = _granularity()
        domain = values["domain"] or (domains[0] if domains else "")
        if len(domain) > MAX_DOMAIN_CHARS:
            raise ValidationError(
                f"domain must be at most {MAX_DOMAIN_CHARS} characters",
                code="invalid_parameter",
                details={"parameter": "domain"},
            )
        start = instant_arg("from", calendar)
        end = instant_arg("to", calendar)
    except ValidationError as invalid:
        error = invalid.message
        domain, granularity = values["domain"], values["granularity"]
    if error is None and domain:
        try:
            if start is None and end is None:
                start, end = traffic_rollups.default_range(
                    domain=domain,
                    granularity=granularity,
                    span=DEFAULT_SPAN[granularity],
                    min_span=MIN_DEFAULT_SPAN[granularity],
                    bucket=BUCKET[granularity],
                )
            start, end = _range(start, end, granularity)
            points, cut = traffic_rollups.bounded_series(
                domain=domain,
                granularity=granularity,
                start=start,
                end=end,
                max_rows=MAX_ROWS,
            )
        except ValidationError as invalid:
            error = invalid.message
        else:
            if cut is not None and cut > start:
                end = cut  # the chart ends where the data it shows ends
            chart = build_chart(
                points,
                domain=domain,
                granularity=granularity,
                start=start,
                end=end,
                tz=calendar.tz,
            )
    table = [
        {
            "start": point[0].astimezone(calendar.tz).strftime("%Y-%m-%d %H:%M"),
            "requests": point[1],
            "response_bytes": format_bytes(point[2]),
            "request_bytes": format_bytes(point[3]),
        }
        for point in points
    ]
    body = render_template(
        "console/traffic.html",
        values={**values, "domain": domain, "granularity": granularity},
        domains=domains,
        more_domains=more_domains,
        chart=chart,
        table=table,
        error=error,
        cut=cut.astimezone(calendar.tz).strftime("%Y-%m-%d %H:%M") if cut else None,
        max_rows=MAX_ROWS,
        timezone=settings.traffic.timezone,
    )
    return body, 400 if error else 200
