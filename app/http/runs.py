"""Task runs: start one now, list them, cancel one (issue 33, docs/architecture.md "Runs").

Thin: requests become ``app.scan_control.runs`` service calls, which own their
transactions. Deleting a task (``DELETE /api/tasks/<id>``) is here too: it hides the
task at once and leaves the removal to the runner's purge job.
"""

from __future__ import annotations

from flask import Blueprint, jsonify

from app.http import context
from app.http.guards import current_user, require_user
from app.http.requests import int_arg, page_limit
from app.scan_control import purge, runs

blueprint = Blueprint("runs", __name__, url_prefix="/api/tasks")


@blueprint.post("/<int:task_id>/runs")
@require_user
def start_run_route(task_id: int):
    run = runs.start_run(
        task_id, trigger="manual", limits=context.settings().scan, user=current_user()
    )
    return jsonify({"run": run.public()}), 201


@blueprint.get("/<int:task_id>/runs")
@require_user
def list_runs_route(task_id: int):
    limit = page_limit(default=50, maximum=500)
    before = int_arg("before", minimum=1)
    items, next_before = runs.runs_of_task(
        current_user(), task_id, limit=limit, before_number=before
    )
    return jsonify({"items": [r.public() for r in items], "next_before": next_before})


@blueprint.get("/<int:task_id>/runs/<int:run_id>")
@require_user
def get_run_route(task_id: int, run_id: int):
    return jsonify({"run": runs.find_run(current_user(), task_id, run_id).public()})


@blueprint.post("/<int:task_id>/runs/<int:run_id>/cancel")
@require_user
def cancel_run_route(task_id: int, run_id: int):
    return jsonify({"run": runs.cancel_run(current_user(), task_id, run_id).public()})


@blueprint.delete("/<int:task_id>")
@require_user
def delete_task_route(task_id: int):
    """The task disappears at once; the runner's purge removes its data (202)."""
    return jsonify({"purge": purge.request_delete(current_user(), task_id)}), 202
