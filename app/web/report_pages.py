"""Report pages: one's definitions and reports, a report with its mail, run now (WEB-9).

The pages call the report services (``app.reports.definitions`` and
``app.reports.records``) with the API's scoping: a user lists and runs only
their own definitions and sees only their own reports (another user's report
is a 404, an admin sees any). The archived mail is linked, not inlined: it is
served by ``GET /api/reports/<id>/mail.html`` under its own strict policy.
"Run now", creating a definition and deleting one are POSTs carrying the
session's CSRF token. The create form goes through the API's own validation
(``definitions.create_definition``), so a bad field is the same rule and the
same message, shown next to the field with the input kept, and nothing is
written.
"""

from __future__ import annotations

from typing import Any

from flask import redirect, render_template, request, url_for

from app.errors import NotFound, ValidationError
from app.http import context
from app.http.requests import decode_cursor, encode_cursor
from app.reports import definitions, records
from app.reports import service as report_service
from app.scan_control import service as scan_service
from app.web import blueprint
from app.web.access import page_user, signed_in_user
from app.web.search_choices import saved_search_choices, search_reference

PAGE_SIZE = 50
TASK_CHOICES = 100


PERIOD_CHOICES = ("daily", "weekly", "on_demand")
EMPTY_FORM = {
    "name": "",
    "task_id": "",
    "period": "daily",
    "recipients": "",
    "template": "default",
    "timezone": "UTC",
    "search": "",
    "query": "",
}


@blueprint.get("/reports")
@page_user
def reports():
    return _render_reports(dict(EMPTY_FORM), {})


def _render_reports(form: dict[str, str], field_errors: dict[str, str], status: int = 200):
    user = signed_in_user()
    cursor = decode_cursor()
    items, next_id = report_service.list_reports(
        user.id, limit=PAGE_SIZE, after_id=int(cursor["id"]) if cursor else None
    )
    next_url = None
    if next_id:
        next_url = url_for(
            "web.reports", cursor=encode_cursor({"id": next_id}, endpoint="web.reports")
        )
    body = render_template(
        "console/reports.html",
        definitions=definitions.list_definitions(user),
        reports=items,
        next_url=next_url,
        first_url=url_for("web.reports") if cursor else None,
        form=form,
        field_errors=field_errors,
        periods=PERIOD_CHOICES,
        searches=saved_search_choices(user.id),
        # The newest tasks as suggestions for the task number (any number can be typed).
        task_choices=scan_service.tasks_of(user, limit=TASK_CHOICES, cursor=None).items,
    )
    return body, status


def _definition_body(form: dict[str, str]) -> dict[str, Any]:
    """The form as the API's JSON body: an empty task number means all of one's assets."""
    body: dict[str, Any] = {
        "name": form["name"],
        "period": form["period"],
        "recipients": [line.strip() for line in form["recipients"].splitlines() if line.strip()],
        "template": form["template"].strip() or "default",
        "timezone": form["timezone"].strip() or "UTC",
    }
    task = form["task_id"].strip().lstrip("#")
    searched = search_reference(form)
    if searched is not None:
        body["scope"] = searched  # never with a task number: refused before this
    if not task:
        body.setdefault("scope", "all")
    elif task.isdecimal() and len(task) <= 19:
        body["task_id"] = int(task)
    else:
        body["task_id"] = task  # refused by the validation, naming the field
    return body


@blueprint.post("/reports/definitions")
@page_user
def report_definition_create():
    form = {key: request.form.get(key, default)[:4000] for key, default in EMPTY_FORM.items()}
    if form["task_id"].strip() and search_reference(form) is not None:
        # The API's words name its JSON fields ("scope"); the form has none of that name.
        both = (
            "a report covers one task, or the assets a saved search or query finds across "
            "all your tasks: clear the task number or the search"
        )
        return _render_reports(form, {"task_id": both}, status=400)
    try:
        definitions.create_definition(
            signed_in_user(),
            _definition_body(form),
            max_recipients=context.settings().reports.max_recipients,
        )
    except (ValidationError, NotFound) as refused:
        field = (refused.details or {}).get("field") or "form"
        field = {"scope": "task_id", "scope.search": "search", "scope.query": "query"}.get(
            field, field
        )
        return _render_reports(form, {field: refused.message}, status=400)
    return redirect(url_for("web.reports"), code=303)


@blueprint.post("/reports/definitions/<int:definition_id>/delete")
@page_user
def report_definition_delete(definition_id: int):
    definitions.delete_definition(signed_in_user(), definition_id)
    return redirect(url_for("web.reports"), code=303)


@blueprint.get("/reports/<int:report_id>")
@page_user
def report_detail(report_id: int):
    row, deliveries = report_service.visible_report(signed_in_user(), report_id)
    return render_template(
        "console/report.html",
        report=records.report_dict(row, deliveries),
        has_mail=row.html is not None,
    )


@blueprint.post("/reports/definitions/<int:definition_id>/run")
@page_user
def report_run_now(definition_id: int):
    report = definitions.run_now(
        signed_in_user(),
        definition_id,
        cooldown_seconds=context.settings().reports.run_now_cooldown_seconds,
    )
    return redirect(url_for("web.report_detail", report_id=report["id"]), code=303)
