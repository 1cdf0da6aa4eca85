"""Change-analysis views: a task's change set and one endpoint's history (ANA-5, ANA-6).

Both read the analysis's compact tables in one short transaction, owner-scoped:
a user sees the changes of their own tasks and the history of their own
endpoints (admins see every task; history is always the caller's own view).
"""

from __future__ import annotations

from flask import Blueprint, jsonify, request

from app.analysis.changes import CHANGE_KINDS
from app.analysis.service import endpoint_history, owner_changes
from app.errors import ValidationError
from app.http.guards import current_user, require_user
from app.http.hosts import endpoint_args
from app.http.requests import int_arg, page_limit
from app.scan_control.reads import task_names
from app.scan_control.run_views import check_run_pair, compare, run_changes

blueprint = Blueprint("changes", __name__, url_prefix="/api")


def _invalid(parameter: str, message: str) -> ValidationError:
    return ValidationError(message, code="invalid_parameter", details={"parameter": parameter})


def change_kind_arg() -> str | None:
    kind = request.args.get("kind") or None
    if kind is not None and kind not in CHANGE_KINDS:
        raise _invalid("kind", "kind must be one of " + ", ".join(CHANGE_KINDS))
    return kind


@blueprint.get("/changes")
@require_user
def change_feed_route():
    """What changed across all of the caller's tasks, newest first (``kind`` narrows)."""
    return jsonify(change_feed_page(current_user().id, limit=page_limit(default=100, maximum=1000)))


def change_feed_page(owner_id: int, *, limit: int) -> dict:
    """The change feed page the request asks for, each change with its task's name
    (shared with the console's Changes page)."""
    page = owner_changes(
        owner_id,
        kind=change_kind_arg(),
        limit=limit,
        cursor=request.args.get("cursor") or None,
    )
    names = task_names([item["task_id"] for item in page["items"]])
    for item in page["items"]:
        item["task_name"] = names.get(item["task_id"])
    return page


@blueprint.get("/tasks/<int:task_id>/changes")
@require_user
def task_changes_route(task_id: int):
    kind = change_kind_arg()
    limit = page_limit(default=100, maximum=1000)
    cursor = request.args.get("cursor") or None
    from_run, to_run = int_arg("from_run", minimum=1), int_arg("to_run", minimum=1)
    check_run_pair(from_run, to_run, request.args.get("run"))
    if from_run is not None and to_run is not None:
        page = compare(
            current_user(),
            task_id,
            from_run=from_run,
            to_run=to_run,
            kind=kind,
            limit=limit,
            cursor=cursor,
        )
    else:
        page = run_changes(
            current_user(),
            task_id,
            run_id=int_arg("run", minimum=1),
            kind=kind,
            limit=limit,
            cursor=cursor,
        )
    return jsonify(page)


@blueprint.get("/assets/history")
@require_user
def asset_history_route():
    # The host page's address rule: a zone identifier is a 400 (it was a 500 here).
    ip, port, transport = endpoint_args(request.args)
    limit = page_limit(default=100, maximum=1000)
    history = endpoint_history(
        owner_id=current_user().id,
        ip=ip,
        port=port,
        transport=transport,
        limit=limit,
        cursor=request.args.get("cursor") or None,
    )
    return jsonify(history)
