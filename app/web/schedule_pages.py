"""A task's schedule on its console page: the next five fire times, edit, Pause and Resume.

The page shows what ``GET /api/tasks/<id>`` shows plus the next fire times
(``schedules.task_schedule``); the buttons post to the same services as
``PATCH /api/tasks/<id>`` (the edit form: a cron line with its zone, or an interval)
and ``POST /api/tasks/<id>/schedule/pause|resume``, and come back to the task page.
A refused edit is the API's 400, naming the field, shown on the task page above the
form as typed (the save route is in ``task_pages``, which renders that page).
"""

from __future__ import annotations

from typing import Any

from flask import redirect, request, url_for

from app.errors import ValidationError
from app.scan_control import schedules
from app.web import blueprint
from app.web.access import page_user, signed_in_user

UPCOMING_FIRE_TIMES = 5


def schedule_for_page(task_id: int):
    return schedules.task_schedule(signed_in_user(), task_id, upcoming=UPCOMING_FIRE_TIMES)


@blueprint.post("/tasks/<int:task_id>/schedule/pause")
@page_user
def task_schedule_pause(task_id: int):
    schedules.set_paused(signed_in_user(), task_id, True)
    return redirect(url_for("web.task_detail", task_id=task_id, _anchor="schedule"), code=303)


@blueprint.post("/tasks/<int:task_id>/schedule/resume")
@page_user
def task_schedule_resume(task_id: int):
    schedules.set_paused(signed_in_user(), task_id, False)
    return redirect(url_for("web.task_detail", task_id=task_id, _anchor="schedule"), code=303)


def schedule_from_form() -> dict[str, Any] | None:
    """The edit form's fields as the API's ``schedule`` value (None: remove it)."""
    form = request.form
    if form.get("remove"):
        return None
    value: dict[str, Any] = {}
    if form.get("kind") == "every":
        value["every_seconds"] = _form_int("every_seconds")
    else:
        value["cron"] = form.get("cron", "")
        value["timezone"] = form.get("timezone", "").strip() or "UTC"
    if form.get("jitter_seconds", "").strip():
        value["jitter_seconds"] = _form_int("jitter_seconds")
    return value


def _form_int(name: str) -> int:
    text = request.form.get(name, "").strip()
    try:
        return int(text)
    except ValueError:
        raise ValidationError(
            f"schedule.{name}: must be a whole number of seconds",
            code="invalid_schedule",
            details={"field": f"schedule.{name}", "value": text},
        ) from None


def schedule_form_values(schedule: dict[str, Any] | None, typed: Any = None) -> dict[str, str]:
    """The edit form's fields: as typed (``typed``: a refused form, shown again to be
    corrected), else from the task's schedule (None: the form's defaults)."""
    if typed is not None:
        return {name: typed.get(name, "") for name in _FORM_FIELDS}
    current = schedule or {}
    every = current.get("every_seconds")
    jitter = current.get("jitter_seconds")
    return {
        "kind": "every" if every else "cron",
        "cron": current.get("cron") or "0 3 * * *",
        "timezone": current.get("timezone") or "UTC",
        "every_seconds": str(every) if every else "",
        "jitter_seconds": str(jitter) if jitter else "",
    }


_FORM_FIELDS = ("kind", "cron", "timezone", "every_seconds", "jitter_seconds")
