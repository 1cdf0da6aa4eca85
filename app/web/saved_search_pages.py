"""Saved searches from the console's Assets page: save the search box's query under a
name, list one's searches beside the box, delete one (docs/search-language.md).

The forms post to the Assets page's own query string, so a refusal (a name taken, a
query that does not parse, a search a rule still uses) shows that same page again with
the message. The checks are the API's (``app.saved_searches``).
"""

from __future__ import annotations

from flask import redirect, request, url_for

from app.errors import Conflict, ValidationError
from app.observability import emit
from app.saved_searches import records
from app.saved_searches import service as saved_searches
from app.web import blueprint
from app.web.access import page_user, signed_in_user
from app.web.asset_pages import assets_page


def _assets_url() -> str:
    """The Assets page the form was posted from (its query string), first page."""
    return url_for("web.assets", **{k: v for k, v in request.args.items() if k != "cursor"})


@blueprint.post("/searches")
@page_user
def save_search():
    user = signed_in_user()
    form = {"name": request.form.get("name", ""), "query": request.form.get("query", "")}
    try:
        row = saved_searches.create_search(user.id, records.validate(form))
    except (ValidationError, Conflict) as refused:
        status = 409 if isinstance(refused, Conflict) else 400
        return assets_page(save=form, searches_error=refused.message, status=status)
    emit("SearchSavedFromConsole", search_id=row.id, user_id=user.id)
    return redirect(_assets_url(), code=303)


@blueprint.post("/searches/<int:search_id>/update")
@page_user
def update_search(search_id: int):
    """Give a saved search the search box's query: the alert rules and reports that use
    it watch the new query from their next change set or report on (they refer to the
    search, not a copy)."""
    user = signed_in_user()
    saved_searches.get_search(user.id, search_id)  # another's or none: 404 before the form
    try:
        saved_searches.update_search(
            user.id,
            search_id,
            records.validate({"query": request.form.get("query", "")}, partial=True),
        )
    except ValidationError as refused:
        return assets_page(searches_error=refused.message, status=400)
    emit("SearchUpdatedFromConsole", search_id=search_id, user_id=user.id)
    return redirect(_assets_url(), code=303)


@blueprint.post("/searches/<int:search_id>/delete")
@page_user
def delete_search(search_id: int):
    user = signed_in_user()
    try:
        saved_searches.delete_search(user.id, search_id)
    except Conflict as refused:  # an alert rule or report definition uses it
        return assets_page(searches_error=refused.message, status=409)
    emit("SearchDeletedFromConsole", search_id=search_id, user_id=user.id)
    return redirect(_assets_url(), code=303)
