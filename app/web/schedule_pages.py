"""A task's schedule on its console page: the next five fire times, Pause and Resume.

The page shows what ``GET /api/tasks/<id>`` shows plus the next fire times
(``schedules.task_schedule``); the buttons post to the same service as
``POST /api/tasks/<id>/schedule/pause|resume`` and come back to the task page.
"""

from __future__ import annotations

from flask import redirect, url_for

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
