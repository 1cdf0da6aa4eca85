"""Task routes for logged-in users: create, list, detail, update, executions (SCN-2, SCN-5),
and the schedule's pause and resume (docs/schedules.md).

Thin: each route calls one ``app.scan_control.service`` or ``app.scan_control.schedules``
function, which owns its transaction. Runs, cancel and delete are in ``app.http.runs``.
"""

from __future__ import annotations

from flask import Blueprint, jsonify, request

from app.errors import ValidationError
from app.http import context
from app.http.guards import current_user, require_user
from app.http.requests import decode_cursor, encode_cursor, int_arg, json_body, page_limit
from app.scan_control import schedules, service
from app.scan_control.query import TASK_STATUSES

blueprint = Blueprint("tasks", __name__, url_prefix="/api/tasks")


@blueprint.post("")
@require_user
def create_task_route():
    task = schedules.create_task_for_user(current_user(), json_body(), context.settings().scan)
    return jsonify({"task": task}), 201


@blueprint.patch("/<int:task_id>")
@require_user
def update_task_route(task_id: int):
    task = schedules.update_task(current_user(), task_id, json_body(), context.settings().scan)
    return jsonify({"task": task})


@blueprint.post("/<int:task_id>/schedule/pause")
@require_user
def pause_schedule_route(task_id: int):
    return jsonify({"schedule": schedules.set_paused(current_user(), task_id, True)})


@blueprint.post("/<int:task_id>/schedule/resume")
@require_user
def resume_schedule_route(task_id: int):
    return jsonify({"schedule": schedules.set_paused(current_user(), task_id, False)})


@blueprint.get("")
@require_user
def list_tasks_route():
    status = request.args.get("status") or None
    if status is not None and status not in TASK_STATUSES:
        raise ValidationError(
            "unknown status filter",
            code="invalid_parameter",
            details={"parameter": "status", "allowed": list(TASK_STATUSES)},
        )
    limit = page_limit()
    cursor = decode_cursor()
    page = service.tasks_of(
        current_user(),
        limit=limit,
        cursor=cursor,
        status=status,
        name_contains=request.args.get("q") or None,
        parent_task_id=int_arg("parent_task_id", minimum=1),
    )
    return jsonify(
        {
            "items": page.items,
            "next_cursor": encode_cursor(page.next_cursor) if page.next_cursor else None,
        }
    )


@blueprint.get("/<int:task_id>")
@require_user
def get_task_route(task_id: int):
    return jsonify({"task": service.find_task(current_user(), task_id)})


@blueprint.get("/<int:task_id>/executions")
@require_user
def list_executions_route(task_id: int):
    limit = page_limit(default=100, maximum=1000)
    cursor = decode_cursor()
    page = service.executions_of(current_user(), task_id, limit=limit, cursor=cursor)
    return jsonify(
        {
            "items": page.items,
            "next_cursor": encode_cursor(page.next_cursor) if page.next_cursor else None,
        }
    )
