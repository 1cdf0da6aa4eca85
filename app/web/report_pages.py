"""Report pages: one's definitions and reports, a report with its mail, run now (WEB-9).

The pages call the report services (``app.reports.definitions`` and
``app.reports.records``) with the API's scoping: a user lists and runs only
their own definitions and sees only their own reports (another user's report
is a 404, an admin sees any). The archived mail is linked, not inlined: it is
served by ``GET /api/reports/<id>/mail.html`` under its own strict policy.
"Run now" is a POST carrying the session's CSRF token.
"""

from __future__ import annotations

from flask import redirect, render_template, url_for

from app.db import transaction
from app.errors import NotFound
from app.http.requests import decode_cursor, encode_cursor
from app.reports import definitions, records
from app.web import blueprint
from app.web.access import page_user, signed_in_user

PAGE_SIZE = 50


@blueprint.get("/reports")
@page_user
def reports():
    user = signed_in_user()
    cursor = decode_cursor()
    with transaction() as conn:
        items, next_id = records.list_reports(
            conn,
            owner_id=user.id,
            limit=PAGE_SIZE,
            after_id=int(cursor["id"]) if cursor else None,
        )
    next_url = None
    if next_id:
        next_url = url_for("web.reports", cursor=encode_cursor({"id": next_id}))
    return render_template(
        "console/reports.html",
        definitions=definitions.list_definitions(user),
        reports=items,
        next_url=next_url,
        first_url=url_for("web.reports") if cursor else None,
    )


@blueprint.get("/reports/<int:report_id>")
@page_user
def report_detail(report_id: int):
    user = signed_in_user()
    with transaction() as conn:
        row = records.get_report_row(conn, report_id)
        if row is None or (not user.is_admin and row.owner_id != user.id):
            raise NotFound("report not found", code="report_not_found")
        deliveries = records.deliveries_of(conn, [report_id]).get(report_id, [])
    return render_template(
        "console/report.html",
        report=records.report_dict(row, deliveries),
        has_mail=row.html is not None,
    )


@blueprint.post("/reports/definitions/<int:definition_id>/run")
@page_user
def report_run_now(definition_id: int):
    report = definitions.run_now(signed_in_user(), definition_id)
    return redirect(url_for("web.report_detail", report_id=report["id"]), code=303)
