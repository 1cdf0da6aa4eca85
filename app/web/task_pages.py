"""Task pages: the list, the create form, a task with its runs and executions, its results
(WEB-4); Run now, Cancel a run and Delete (after a confirmation page) post to the same
services as the API (issue 33).

Lists page by keyset (the same signed cursors as the API), so a deep page costs
what the first one does. The create form goes through the same validation as
``POST /api/tasks``; the target parser reports each bad target with its index,
which the form maps back to the line of the textarea it came from, so the error
is shown next to that line. A task in flight refreshes itself: the page's
script polls ``GET /api/tasks/<id>`` (and without JavaScript, a slow meta
refresh does the same).
"""

from __future__ import annotations

from typing import Any

from flask import redirect, render_template, request, url_for

from app.analysis.changes import CHANGE_KINDS
from app.errors import ApiError, Conflict, ValidationError
from app.http import context
from app.http.requests import decode_cursor, encode_cursor
from app.scan_control import purge, runs, schedules, service
from app.scan_control.creation import DEFAULT_PROFILE, SCAN_PROFILES, validate_task_request
from app.scan_control.query import TASK_STATUSES
from app.target_rules import TRANSPORTS
from app.web import blueprint
from app.web.access import page_user, signed_in_user
from app.web.schedule_pages import schedule_for_page, schedule_form_values, schedule_from_form

PAGE_SIZE = 50
RUNS_SHOWN = 20
MAX_TEXTAREA_LINES = 10_000
IN_FLIGHT_PROJECTION = ("pending", "running", "retrying")
EMPTY_TASK_FORM = {
    "name": "",
    "targets": "",
    "ports": "",
    "transports": ["tcp"],
    "profile": DEFAULT_PROFILE,
}
# What each scan profile probes, in a line the form shows beside its choice (the nmap
# arguments are in docs/inventory.md, "Scan profiles").
PROFILE_WORDS = {
    "quick": "open ports only, the fastest: no services, banners, certificates or pages",
    "standard": "ports with services, versions, banners, certificates and page titles",
    "deep": "standard probed harder, plus HTTP headers, SSH host keys and TLS ciphers",
}


def task_in_flight(task: dict[str, Any]) -> bool:
    """Whether the task's numbers can still change (the page keeps refreshing while so)."""
    return task["status"] in ("queued", "running") or (
        task.get("projection_status") in IN_FLIGHT_PROJECTION
    )


@blueprint.get("/tasks")
@page_user
def tasks():
    status = request.args.get("status") or None
    if status is not None and status not in TASK_STATUSES:
        raise ValidationError(
            f"status must be one of {', '.join(TASK_STATUSES)}", code="invalid_parameter"
        )
    name = (request.args.get("q") or "").strip()[:200] or None
    cursor = decode_cursor()
    page = service.tasks_of(
        signed_in_user(),
        limit=PAGE_SIZE,
        cursor=cursor,
        status=status,
        name_contains=name,
        overview=True,
    )
    next_url = None
    if page.next_cursor:
        next_url = url_for(
            "web.tasks",
            status=status,
            q=name,
            cursor=encode_cursor(page.next_cursor, endpoint="web.tasks"),
        )
    return render_template(
        "console/tasks.html",
        items=page.items,
        status=status,
        q=name or "",
        statuses=TASK_STATUSES,
        next_url=next_url,
        first_url=url_for("web.tasks", status=status, q=name) if cursor else None,
    )


def _form_lines(text: str) -> list[tuple[int, str]]:
    """The textarea's non-empty lines with their 1-based line numbers."""
    lines = text.splitlines()[:MAX_TEXTAREA_LINES]
    return [(number, line.strip()) for number, line in enumerate(lines, 1) if line.strip()]


def _render_new(
    form: dict[str, Any],
    line_errors=None,
    field_errors=None,
    status: int = 200,
    *,
    editing: dict[str, Any] | None = None,
):
    body = render_template(
        "console/task_new.html",
        form=form,
        editing=editing,
        transports=TRANSPORTS,
        profiles=[(name, PROFILE_WORDS[name]) for name in SCAN_PROFILES],
        line_errors=line_errors or {},
        field_errors=field_errors or {},
    )
    return body, status


@blueprint.route("/tasks/new", methods=["GET", "POST"])
@page_user
def task_new():
    if request.method == "GET":
        return _render_new(dict(EMPTY_TASK_FORM))
    form = _posted_task_form()
    scan = context.settings().scan
    try:
        task_request = validate_task_request(_task_body(form), scan)
    except ValidationError as invalid:
        return _render_new(form, *_form_errors(invalid, form), status=400)
    task = service.create_task_for(signed_in_user(), task_request, limits=scan, via="console")
    return redirect(url_for("web.task_detail", task_id=task["id"]), code=303)


@blueprint.route("/tasks/<int:task_id>/edit", methods=["GET", "POST"])
@page_user
def task_edit(task_id: int):
    """Change a task's name and scope; the next run scans the new scope (the API's
    ``PATCH /api/tasks/<id>``, ``schedules.update_task``)."""
    task = service.find_task(signed_in_user(), task_id)
    if request.method == "GET":
        form = {
            "name": task["name"],
            "targets": "\n".join(task["targets"]),
            "ports": task["ports"],
            "transports": task["transports"],
            "profile": task["profile"],
        }
        return _render_new(form, editing=task)
    form = _posted_task_form()
    try:
        schedules.update_task(
            signed_in_user(), task_id, _task_body(form, editing=True), context.settings().scan
        )
    except ValidationError as invalid:
        return _render_new(form, *_form_errors(invalid, form), status=400, editing=task)
    return redirect(url_for("web.task_detail", task_id=task_id), code=303)


def _posted_task_form() -> dict[str, Any]:
    return {
        "name": request.form.get("name", ""),
        "targets": request.form.get("targets", ""),
        "ports": request.form.get("ports", ""),
        "transports": request.form.getlist("transports"),
        "profile": request.form.get("profile") or DEFAULT_PROFILE,
    }


def _task_body(form: dict[str, Any], *, editing: bool = False) -> dict[str, Any]:
    """The form as the API's task body (targets: the textarea's non-empty lines). No
    transport ticked: a new task takes the default (tcp); a change must name one."""
    body = {
        "name": form["name"],
        "targets": [text for _, text in _form_lines(form["targets"])],
        "ports": form["ports"],
        "profile": form["profile"],
    }
    if form["transports"] or editing:
        body["transports"] = form["transports"] or None
    return body


def _form_errors(
    invalid: ValidationError, form: dict[str, Any]
) -> tuple[list[tuple[int, str, list[str]]], dict[str, list[str]]]:
    """A refused task body's problems placed on the form: each bad target next to its
    line of the textarea, the rest next to their field."""
    numbered = _form_lines(form["targets"])
    line_errors: dict[int, list[str]] = {}
    field_errors: dict[str, list[str]] = {}
    details = invalid.details or {}
    for item in details.get("items", []):
        index = item.get("index")
        if item.get("field") == "targets" and isinstance(index, int) and index < len(numbered):
            line_errors.setdefault(numbered[index][0], []).append(item["reason"])
        else:
            reason = item.get("reason", "invalid")
            if item.get("field") == "ports" and isinstance(index, int):
                reason = f"{str(item.get('value')).strip()!s}: {reason}"
            field_errors.setdefault(item.get("field", "form"), []).append(reason)
    if not line_errors and not field_errors:
        field_errors[details.get("field") or "form"] = [invalid.message]
    lines = form["targets"].splitlines()[:MAX_TEXTAREA_LINES]
    listing = [(n, lines[n - 1], line_errors.get(n, [])) for n in sorted(line_errors)]
    return listing, field_errors


@blueprint.get("/tasks/<int:task_id>")
@page_user
def task_detail(task_id: int):
    return task_page(task_id)


@blueprint.post("/tasks/<int:task_id>/schedule")
@page_user
def task_schedule_save(task_id: int):
    """The schedule form (``PATCH /api/tasks/<id>``'s ``schedule``); a refusal shows the
    task page again with the message above the form as typed."""
    try:
        schedules.update_task(
            signed_in_user(),
            task_id,
            {"schedule": schedule_from_form()},
            context.settings().scan,
        )
    except ValidationError as refused:
        return task_page(task_id, schedule_error=refused.message, typed=request.form, status=400)
    return redirect(url_for("web.task_detail", task_id=task_id, _anchor="schedule"), code=303)


def task_page(
    task_id: int,
    *,
    schedule_error: str | None = None,
    typed=None,
    run_error: Conflict | None = None,
    export_error: ApiError | None = None,
    status: int = 200,
):
    cursor = decode_cursor()
    task, executions, changes = service.task_page(
        signed_in_user(), task_id, limit=PAGE_SIZE, cursor=cursor
    )
    task_runs, _ = runs.runs_of_task(signed_in_user(), task_id, limit=RUNS_SHOWN)
    next_url = None
    if executions.next_cursor:
        next_url = url_for(
            "web.task_detail",
            task_id=task_id,
            cursor=encode_cursor(executions.next_cursor, endpoint="web.task_detail"),
        )
    schedule = schedule_for_page(task_id)
    return render_template(
        "console/task.html",
        task=task,
        executions=executions.items,
        next_url=next_url,
        in_flight=task_in_flight(task),
        changes=changes,
        change_kinds=CHANGE_KINDS,
        runs=[r.public() for r in task_runs],
        schedule=schedule,
        schedule_form=schedule_form_values(schedule, typed),
        schedule_error=schedule_error,
        run_error=run_error,
        export_error=export_error,
    ), status


@blueprint.get("/tasks/<int:task_id>/results")
@page_user
def task_results(task_id: int):
    task = service.find_task(signed_in_user(), task_id)
    cursor = request.args.get("cursor") or None
    executions = runs.results_scope(signed_in_user(), task_id, None)  # the latest run's
    page = context.store().execution_results(
        task_id, cursor=cursor, limit=PAGE_SIZE, execution_ids=executions
    )
    next_url = (
        url_for("web.task_results", task_id=task_id, cursor=page.next_cursor)
        if page.next_cursor
        else None
    )
    return render_template(
        "console/results.html",
        task=task,
        items=page.items,
        total_ips=page.total_ips,
        total_endpoints=page.total_endpoints,
        next_url=next_url,
        first_url=url_for("web.task_results", task_id=task_id) if cursor else None,
    )


@blueprint.post("/tasks/<int:task_id>/runs")
@page_user
def task_run_now(task_id: int):
    try:
        runs.start_run(
            task_id, trigger="manual", limits=context.settings().scan, user=signed_in_user()
        )
    except Conflict as refused:  # a run is active (another tab, the schedule): said here
        return task_page(task_id, run_error=refused, status=409)
    return redirect(url_for("web.task_detail", task_id=task_id), code=303)


@blueprint.post("/tasks/<int:task_id>/runs/<int:run_id>/cancel")
@page_user
def task_run_cancel(task_id: int, run_id: int):
    runs.cancel_run(signed_in_user(), task_id, run_id)
    return redirect(url_for("web.task_detail", task_id=task_id), code=303)


@blueprint.get("/tasks/<int:task_id>/delete")
@page_user
def task_delete_confirm(task_id: int):
    task = service.find_task(signed_in_user(), task_id)
    return render_template("console/task_delete.html", task=task)


@blueprint.post("/tasks/<int:task_id>/delete")
@page_user
def task_delete(task_id: int):
    purge.request_delete(signed_in_user(), task_id)
    return redirect(url_for("web.tasks"), code=303)
