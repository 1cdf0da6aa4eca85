"""Admin routes of the operator's tools: config check, resources, slow SQL, diagnostics."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from flask import Blueprint, Response, jsonify, request

from app.errors import ValidationError
from app.http import context
from app.http.guards import require_admin
from app.http.requests import datetime_arg

blueprint = Blueprint("system", __name__, url_prefix="/api")

MAX_RANGE = timedelta(days=400)


@blueprint.get("/config/check")
@require_admin
def config_check_route():
    from app.ops.config_check import check_report, full_check

    settings = context.settings()
    check = full_check(settings, context.config_check())
    return jsonify(check_report(settings, check))


@blueprint.get("/system/resources")
@require_admin
def resources_route():
    from app.ops.resources import METRICS, series

    end = datetime_arg("to") or datetime.now(UTC)
    start = datetime_arg("from") or end - timedelta(hours=1)
    if start >= end:
        raise ValidationError(
            "from must be before to", code="invalid_parameter", details={"parameter": "from"}
        )
    if end - start > MAX_RANGE:
        raise ValidationError(
            "the range from..to may span at most 400 days",
            code="invalid_parameter",
            details={"parameter": "from"},
        )
    metrics = [m for raw in request.args.getlist("metric") for m in raw.split(",") if m]
    unknown = sorted(set(metrics) - set(METRICS))
    if unknown:
        raise ValidationError(
            f"unknown metric {unknown[0]!r}; known: {', '.join(METRICS)}",
            code="invalid_parameter",
            details={"parameter": "metric"},
        )
    return jsonify(
        {
            "from": start.isoformat(),
            "to": end.isoformat(),
            "max_points": 500,
            "series": series(start, end, metrics or None),
        }
    )


@blueprint.get("/system/slow-sql")
@require_admin
def slow_sql_route():
    from app.ops.slow_sql import report

    return jsonify(report(context.settings()))


@blueprint.get("/system/diagnostics")
@require_admin
def diagnostics_route():
    import tempfile

    from app.ops.diagnostics import write_archive

    # Built into a temporary file first (all database reads done, no connection held),
    # then streamed in chunks; the file is gone when the response is closed.
    spool = tempfile.TemporaryFile()
    write_archive(context.settings(), spool, context.config_check())
    spool.seek(0)

    def chunks():
        try:
            while block := spool.read(64 * 1024):
                yield block
        finally:
            spool.close()

    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return Response(
        chunks(),
        mimetype="application/zip",
        headers={"Content-Disposition": f'attachment; filename="netmap-diagnostics-{stamp}.zip"'},
    )
