"""Result exports from the console: request one from a task page, list one's own (WEB-7).

The export service does the work (owner check, succeeded executions only, the
row the runner builds under a lease); this page only shows the state and the
signed download link once the file is ready.
"""

from __future__ import annotations

from flask import redirect, render_template, request, url_for

from app.exports import service
from app.http import context
from app.http.requests import decode_cursor, encode_cursor
from app.observability import emit
from app.web import blueprint
from app.web.access import page_user, signed_in_user

PAGE_SIZE = 50


@blueprint.post("/tasks/<int:task_id>/exports")
@page_user
def task_export(task_id: int):
    user = signed_in_user()
    export = service.request_export(
        user,
        task_id,
        {"format": request.values.get("format", "")},
        max_queued=context.settings().exports.max_queued_per_user,
    )
    emit("ExportRequestedFromConsole", export_id=export["id"], task_id=task_id, user_id=user.id)
    return redirect(url_for("web.exports"), code=303)


@blueprint.get("/exports")
@page_user
def exports():
    cursor = decode_cursor()
    after = int(cursor["id"]) if cursor else None
    items, next_id = service.list_exports(
        context.settings(),
        context.object_store(),
        signed_in_user().id,
        limit=PAGE_SIZE,
        after_id=after,
    )
    next_url = url_for("web.exports", cursor=encode_cursor({"id": next_id})) if next_id else None
    in_flight = any(item["status"] in ("queued", "building") for item in items)
    return render_template(
        "console/exports.html", items=items, next_url=next_url, in_flight=in_flight
    )
