"""Admin pages of the operator's tools: system resources and slow SQL (WEB-10).

Both read the ops services the admin API uses. Resources: charts of the last hour
(``app.ops.resources.series``, drawn as SVG the way the traffic page draws its
chart: memory and CPU of this instance's processes, the host's CPU, memory and data
volume) and a table of the latest sample per host, metric and process
(``app.ops.resources.latest``, samples of the last 10 minutes), every value with its
unit (MiB, %, MiB/s). Slow SQL: the report
(``app.ops.slow_sql.report``: the last sampled window's statements by total and
by mean time, or why statistics are unavailable). Admins only.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from flask import render_template

from app.http import context
from app.ops import resources, slow_sql
from app.traffic.business_time import BusinessCalendar
from app.web import blueprint
from app.web.access import page_admin
from app.web.line_chart import build_line_chart, format_value

LATEST_MAX_AGE_SECONDS = 600.0
CHART_SPAN = timedelta(hours=1)
CHART_POINTS = 120  # 30-second buckets over the hour
# (title, metrics, unit, a share of a whole: the axis reaches 100 %)
CHARTS = (
    ("Memory of this instance's processes", ("process_rss_bytes",), "bytes", False),
    ("CPU of this instance's processes", ("process_cpu_percent",), "percent", False),
    (
        "Host CPU, memory and data volume used",
        ("cpu_percent", "memory_used_percent", "disk_used_percent"),
        "percent",
        True,
    ),
)


def _charts(tz: Any) -> list[Any]:
    end = datetime.now(UTC)
    start = end - CHART_SPAN
    wanted = [metric for _t, metrics, _u, _w in CHARTS for metric in metrics]
    found = resources.series(start, end, wanted, max_points=CHART_POINTS)
    hosts = {entry["host"] for entry in found}
    charts = []
    for title, metrics, unit, whole in CHARTS:
        lines = []
        for entry in found:
            if entry["metric"] not in metrics:
                continue
            name = entry["process"] or resources.METRIC_LABELS[entry["metric"]]
            if len(hosts) > 1:
                name = f"{entry['host']} {name}"
            samples = [(datetime.fromisoformat(at), value) for at, value, _peak in entry["points"]]
            lines.append((name, samples))
        charts.append(
            build_line_chart(
                title, lines, unit=unit, start=start, end=end, tz=tz, percent_of_whole=whole
            )
        )
    return charts


@blueprint.get("/admin/resources")
@page_admin
def system_resources():
    tz = BusinessCalendar(context.settings().traffic.timezone).tz
    rows = [
        {
            "host": row.host,
            "process": row.process,
            "metric": row.metric,
            "label": resources.METRIC_LABELS.get(row.metric, row.metric),
            "value": format_value(resources.metric_unit(row.metric), row.value),
        }
        for row in resources.latest(LATEST_MAX_AGE_SECONDS)
    ]
    return render_template(
        "console/resources.html",
        rows=rows,
        charts=_charts(tz),
        max_age_minutes=int(LATEST_MAX_AGE_SECONDS // 60),
    )


@blueprint.get("/admin/slow-sql")
@page_admin
def slow_sql_page():
    report = slow_sql.report(context.settings())
    return render_template("console/slow_sql.html", report=report)
