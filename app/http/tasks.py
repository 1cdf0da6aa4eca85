"""Task routes for logged-in users: create, list, detail, executions (SCN-2, SCN-5)."""

from __future__ import annotations

from flask import Blueprint, jsonify, request

from app.db import transaction
from app.errors import NotFound, ValidationError
from app.http import context
from app.http.guards import current_user, require_user
from app.http.requests import decode_cursor, encode_cursor, int_arg, json_body, page_limit
from app.observability import emit
from app.scan_control import schedules
from app.scan_control.query import (
    TASK_STATUSES,
    get_task,
    list_executions,
    list_tasks,
    task_visible,
)

blueprint = Blueprint("tasks", __name__, url_prefix="/api/tasks")


@blueprint.post("")
@require_user
def create_task_route():
    user = current_user()
    task = schedules.create_task_for_user(user, json_body(), context.settings().scan)
    emit("TaskCreated", task_id=task["id"], user_id=user.id, executions=task["execution_count"])
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
    with transaction() as conn:
        page = list_tasks(
            conn,
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
    with transaction() as conn:
        task = get_task(conn, current_user(), task_id)
    if task is None:
        raise NotFound("task not found", code="task_not_found")
    return jsonify({"task": task})


@blueprint.get("/<int:task_id>/executions")
@require_user
def list_executions_route(task_id: int):
    limit = page_limit(default=100, maximum=1000)
    cursor = decode_cursor()
    with transaction() as conn:
        if not task_visible(conn, current_user(), task_id):
            raise NotFound("task not found", code="task_not_found")
        page = list_executions(conn, task_id, limit=limit, cursor=cursor)
    return jsonify(
        {
            "items": page.items,
            "next_cursor": encode_cursor(page.next_cursor) if page.next_cursor else None,
        }
    )
