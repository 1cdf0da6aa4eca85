"""Admin pages of the operator's tools: system resources and slow SQL (WEB-10).

Both are plain tables over the ops services the admin API uses: the latest
resource sample per host, metric and process (``app.ops.resources.latest``,
samples of the last 10 minutes), and the slow-SQL report
(``app.ops.slow_sql.report``: the last sampled window's statements by total and
by mean time, or why statistics are unavailable). Admins only.
"""

from __future__ import annotations

from flask import render_template

from app.http import context
from app.ops import resources, slow_sql
from app.web import blueprint
from app.web.access import page_admin

LATEST_MAX_AGE_SECONDS = 600.0


@blueprint.get("/admin/resources")
@page_admin
def system_resources():
    rows = resources.latest(LATEST_MAX_AGE_SECONDS)
    return render_template(
        "console/resources.html", rows=rows, max_age_minutes=int(LATEST_MAX_AGE_SECONDS // 60)
    )


@blueprint.get("/admin/slow-sql")
@page_admin
def slow_sql_page():
    report = slow_sql.report(context.settings())
    return render_template("console/slow_sql.html", report=report)
