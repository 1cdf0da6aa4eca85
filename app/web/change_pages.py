"""Change analysis in the console: an endpoint's history and a task's changes (WEB-8).

Both pages read the analysis's compact tables through the same queries as the
API and with the same scoping: the history is always the signed-in user's own
view of the endpoint (owner id from the session, never from the URL), and a
task's changes are shown only to whoever may see the task (another user's task
is a 404). Lists page by keyset with the API's signed cursors.
"""

from __future__ import annotations

from flask import render_template, request, url_for

from app.analysis.changes import CHANGE_KINDS
from app.analysis.service import endpoint_history
from app.http.changes import change_feed_page, change_kind_arg
from app.http.hosts import endpoint_args
from app.http.requests import int_arg
from app.scan_control.run_views import check_run_pair, compare, run_changes
from app.scan_control.runs import runs_of_task
from app.web import blueprint
from app.web.access import page_user, signed_in_user

PAGE_SIZE = 100
MAX_RUNS_LISTED = 50  # the newest runs offered for a comparison


def _endpoint_from_request() -> tuple[str, int, str]:
    return endpoint_args(request.args)


@blueprint.get("/assets/history")
@page_user
def asset_history():
    ip, port, transport = _endpoint_from_request()
    cursor = request.args.get("cursor") or None
    history = endpoint_history(
        owner_id=signed_in_user().id,
        ip=ip,
        port=port,
        transport=transport,
        limit=PAGE_SIZE,
        cursor=cursor,
    )
    key = {"ip": ip, "port": port, "transport": transport}
    next_url = None
    if history["next_cursor"]:
        next_url = url_for("web.asset_history", cursor=history["next_cursor"], **key)
    return render_template(
        "console/asset_history.html",
        history=history,
        next_url=next_url,
        first_url=url_for("web.asset_history", **key) if cursor else None,
    )


@blueprint.get("/changes")
@page_user
def changes_feed():
    """What changed across all of one's tasks, newest first (``GET /api/changes``)."""
    page = change_feed_page(signed_in_user().id, limit=PAGE_SIZE)
    kind = change_kind_arg()
    next_url = (
        url_for("web.changes_feed", kind=kind, cursor=page["next_cursor"])
        if page["next_cursor"]
        else None
    )
    return render_template(
        "console/changes.html",
        page=page,
        kind=kind,
        kinds=CHANGE_KINDS,
        next_url=next_url,
        first_url=url_for("web.changes_feed", kind=kind) if request.args.get("cursor") else None,
    )


@blueprint.get("/tasks/<int:task_id>/changes")
@page_user
def task_changes_page(task_id: int):
    """One run's changes (``run``, default the latest finished), or what differs between
    two runs (``from_run`` and ``to_run``, either order), as the API answers them."""
    user = signed_in_user()
    kind = change_kind_arg()
    cursor = request.args.get("cursor") or None
    from_run, to_run = int_arg("from_run", minimum=1), int_arg("to_run", minimum=1)
    check_run_pair(from_run, to_run, request.args.get("run"))
    run_id = int_arg("run", minimum=1)
    if from_run is not None and to_run is not None:
        page = compare(
            user,
            task_id,
            from_run=from_run,
            to_run=to_run,
            kind=kind,
            limit=PAGE_SIZE,
            cursor=cursor,
        )
        selection = {"from_run": from_run, "to_run": to_run}
    else:
        page = run_changes(user, task_id, run_id=run_id, kind=kind, limit=PAGE_SIZE, cursor=cursor)
        selection = {"run": page["run_id"]} if page.get("run_id") else {}
    task_runs, _ = runs_of_task(user, task_id, limit=MAX_RUNS_LISTED)
    next_url = None
    if page["next_cursor"]:
        next_url = url_for(
            "web.task_changes_page",
            task_id=task_id,
            kind=kind,
            cursor=page["next_cursor"],
            **selection,
        )
    return render_template(
        "console/task_changes.html",
        task_id=task_id,
        kind=kind,
        kinds=CHANGE_KINDS,
        page=page,
        runs=task_runs,
        selection=selection,
        next_url=next_url,
        first_url=(
            url_for("web.task_changes_page", task_id=task_id, kind=kind, **selection)
            if cursor
            else None
        ),
    )
