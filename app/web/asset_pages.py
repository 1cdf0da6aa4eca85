"""The asset search page: every filter of ``GET /api/assets``, keyset pages (WEB-5).

The form's field names are the API's query parameters, so the query is parsed
by the very function the API uses (same validation, same owner scoping: a user
searches their own assets, only an admin may pick the global view). A bad
filter shows the form again with the message, status 400.
"""

from __future__ import annotations

import dataclasses

from flask import render_template, request, url_for

from app.errors import ValidationError
from app.http import context
from app.http.assets import asset_query_from_request
from app.search.port import AssetQuery
from app.web import blueprint
from app.web.access import page_user, signed_in_user

FILTERS = ("ip", "cidr", "port", "transport", "service", "product", "q", "scope")
# The asset status filter (open/gone) arrives with change analysis; the form offers it only
# when the query type knows it, so this page works before and after that lands.
STATUS_FILTER = "status" in {f.name for f in dataclasses.fields(AssetQuery)}


@blueprint.get("/assets")
@page_user
def assets():
    user = signed_in_user()
    values = {name: request.args.get(name, "") for name in FILTERS}
    if STATUS_FILTER:
        values["status"] = request.args.get("status", "")
    error = None
    items: list = []
    next_url = None
    try:
        query = asset_query_from_request(user)
    except ValidationError as invalid:
        error = invalid.message
    else:
        page = context.store().search_assets(query)
        items = page.items
        if page.next_cursor:
            kept = {k: v for k, v in values.items() if v}
            next_url = url_for("web.assets", cursor=page.next_cursor, **kept)
    body = render_template(
        "console/assets.html",
        values=values,
        items=items,
        error=error,
        next_url=next_url,
        paged=bool(request.args.get("cursor")),
        first_url=url_for("web.assets", **{k: v for k, v in values.items() if v}),
        status_filter=STATUS_FILTER,
    )
    return body, 400 if error else 200
