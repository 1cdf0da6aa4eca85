"""Result exports from the console: request one from a task page, list one's own (WEB-7).

The export service does the work (owner check, succeeded executions only, the
row the runner builds under a lease); this page only shows the state and the
signed download link once the file is ready.
"""

from __future__ import annotations

from flask import redirect, render_template, request, url_for

from app.errors import Conflict, TooManyQueued, ValidationError
from app.exports import service
from app.http import context
from app.http.requests import decode_cursor, encode_cursor
from app.observability import emit
from app.search.asset_params import ASSET_PARAMETERS
from app.web import blueprint
from app.web.access import page_user, signed_in_user
from app.web.task_pages import task_page

PAGE_SIZE = 50


@blueprint.post("/tasks/<int:task_id>/exports")
@page_user
def task_export(task_id: int):
    user = signed_in_user()
    try:
        export = service.request_export(
            user,
            task_id,
            {"format": request.values.get("format", "")},
            max_queued=context.settings().exports.max_queued_per_user,
        )
    except (Conflict, ValidationError, TooManyQueued) as refused:
        # Nothing to export yet, a bad format, too many queued: said on the task page,
        # which the user came from (it was the console's generic error page).
        return task_page(task_id, export_error=refused, status=refused.status)
    emit("ExportRequestedFromConsole", export_id=export["id"], task_id=task_id, user_id=user.id)
    return redirect(url_for("web.exports"), code=303)


@blueprint.post("/assets/export")
@page_user
def asset_export():
    """Export what the Assets page lists: the page's own parameters (its query string)
    go to the export as ``filters``, so the runner builds the very search the page ran."""
    user = signed_in_user()
    filters = {name: request.args[name] for name in ASSET_PARAMETERS if request.args.get(name)}
    export = service.request_query_export(
        user,
        {"format": request.form.get("format", ""), "filters": filters},
        max_queued=context.settings().exports.max_queued_per_user,
    )
    emit("ExportRequestedFromConsole", export_id=export["id"], task_id=None, user_id=user.id)
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
    next_url = (
        url_for("web.exports", cursor=encode_cursor({"id": next_id}, endpoint="web.exports"))
        if next_id
        else None
    )
    in_flight = any(item["status"] in ("queued", "building") for item in items)
    for item in items:
        item["search"] = asset_search_label(item)
    return render_template(
        "console/exports.html", items=items, next_url=next_url, in_flight=in_flight
    )


def asset_search_label(export: dict) -> dict | None:
    """An asset export's search as the exports page shows it: the words (``port 443``,
    the query) and the Assets page that lists the same assets (None when the export
    joined a query to a ``q`` filter, which no single page URL spells)."""
    if export["task_id"] is not None:
        return None
    params = dict(export.get("filters") or {})
    query = export.get("query") or ""
    words = [
        f"{name} {value}" for name, value in params.items() if name not in ("sort", "order", "q")
    ]
    texts = [text for text in (query, params.get("q")) if text]
    url = None
    if not (query and "q" in params):
        url = url_for("web.assets", **params, **({"q": query} if query else {}))
    return {"words": words, "texts": texts, "url": url}
