"""The asset search page: every filter of ``GET /api/assets``, keyset pages (WEB-5),
a table sorted by its column headers (WEB-12).

The form's field names are the API's query parameters, so the query is parsed
by the very function the API uses (same validation, same owner scoping: a user
searches their own assets, only an admin may pick the global view). A bad
filter shows the form again with the message, status 400; a search stopped at
``[search] interactive_timeout_seconds`` does so too, status 503.
"""

from __future__ import annotations

import dataclasses

from flask import render_template, request, url_for

from app.errors import ValidationError
from app.http import context
from app.http.assets import asset_query_from_request
from app.http.error_handlers import search_timeout_error
from app.search.asset_sort import ASSET_SORTS, DEFAULT_ORDER, AssetSort, asset_sort
from app.search.port import AssetQuery, SearchTimedOut
from app.web import blueprint
from app.web.access import page_user, signed_in_user
from app.web.search_choices import saved_search_choices

FILTERS = ("ip", "cidr", "port", "transport", "service", "product", "q", "scope")
# The asset status filter (open/gone) arrives with change analysis; the form offers it only
# when the query type knows it, so this page works before and after that lands.
STATUS_FILTER = "status" in {f.name for f in dataclasses.fields(AssetQuery)}


@blueprint.get("/assets")
@page_user
def assets():
    return assets_page()


def assets_page(
    *, save: dict[str, str] | None = None, searches_error: str | None = None, status: int = 200
):
    """The Assets page for the request's query string. A refused saved-search form (save
    or delete) shows it again with the message (``searches_error``) and the name kept
    (``save``), at ``status``."""
    user = signed_in_user()
    values = {name: request.args.get(name, "") for name in FILTERS}
    if STATUS_FILTER:
        values["status"] = request.args.get("status", "")
    error = None
    error_status = 400
    items: list = []
    next_url = None
    kept = {k: v for k, v in values.items() if v}
    current = _current_sort()
    try:
        query = asset_query_from_request(user)
    except ValidationError as invalid:
        error = invalid.message
    else:
        try:
            page = context.store().search_assets(query)
        except SearchTimedOut as stopped:
            # The search box keeps what was typed; the message says how to narrow it.
            error, error_status = search_timeout_error(stopped).message, 503
        else:
            items = page.items
            if page.next_cursor:
                # The cursor is signed for its sort and order: the next page names both.
                next_url = url_for(
                    "web.assets", cursor=page.next_cursor, **kept, **_sorted(current)
                )
    here = {**kept, **_sorted(current)}
    body = render_template(
        "console/assets.html",
        values=values,
        items=items,
        error=error,
        next_url=next_url,
        paged=bool(request.args.get("cursor")),
        first_url=url_for("web.assets", **here),
        export_url=url_for("web.asset_export", **here),
        save_url=url_for("web.save_search", **here),
        here=here,
        # Only the search box is a saved search's query; the other fields are not kept.
        other_filters=sorted(k for k in kept if k not in ("q", "status", "scope")),
        searches=saved_search_choices(user.id),
        save=save or {"name": ""},
        searches_error=searches_error,
        status_filter=STATUS_FILTER,
        sort=current,
        sort_headers=_sort_headers(kept, current),
    )
    return body, error_status if error else status


def _current_sort() -> AssetSort:
    """The table's order as asked (the default when the request's is invalid: the
    query parser reports that one as the page's error)."""
    try:
        return asset_sort(request.args.get("sort"), request.args.get("order"))
    except ValidationError:
        return asset_sort(None, None)


def _sorted(order: AssetSort) -> dict[str, str]:
    return {"sort": order.sort, "order": order.order}


def _sort_headers(kept: dict[str, str], current: AssetSort) -> dict[str, dict[str, str]]:
    """Per sortable column: the link that sorts by it (WEB-12) and its ``aria-sort``.

    The active column's link reverses the order, another column's starts at its own
    default; the filters are kept and the cursor dropped (a new order starts at its top).
    """
    headers = {}
    for column in ASSET_SORTS:
        active = column == current.sort
        if active:
            order = "asc" if current.descending else "desc"
        else:
            order = DEFAULT_ORDER[column]
        headers[column] = {
            "url": url_for("web.assets", **kept, sort=column, order=order),
            "aria": ("descending" if current.descending else "ascending") if active else "",
        }
    return headers
