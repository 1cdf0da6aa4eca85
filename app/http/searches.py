"""Saved searches (``/api/searches``): named search-language queries, owner-scoped.

``GET /api/assets?search=<id>`` runs one (``app.http.assets``); the console's asset
page lists them beside its search box.
"""

from __future__ import annotations

from flask import Blueprint, jsonify

from app.http.guards import current_user, require_user
from app.http.requests import decode_cursor, encode_cursor, json_body, page_limit
from app.saved_searches import records
from app.saved_searches import service as saved

blueprint = Blueprint("searches", __name__, url_prefix="/api")


@blueprint.get("/searches")
@require_user
def list_searches():
    limit = page_limit()
    cursor = decode_cursor()
    after = int(cursor["id"]) if cursor else None
    rows, more = saved.list_searches(current_user().id, limit=limit, after_id=after)
    return jsonify(
        {
            "items": [records.search_dict(row) for row in rows],
            "next_cursor": encode_cursor({"id": rows[-1].id}) if more else None,
        }
    )


@blueprint.post("/searches")
@require_user
def create_search():
    values = records.validate(json_body())
    row = saved.create_search(current_user().id, values)
    return jsonify({"search": records.search_dict(row)}), 201


@blueprint.get("/searches/<int:search_id>")
@require_user
def get_search(search_id: int):
    row = saved.get_search(current_user().id, search_id)
    return jsonify({"search": records.search_dict(row)})


@blueprint.patch("/searches/<int:search_id>")
@require_user
def update_search(search_id: int):
    values = records.validate(json_body(), partial=True)
    row = saved.update_search(current_user().id, search_id, values)
    return jsonify({"search": records.search_dict(row)})


@blueprint.delete("/searches/<int:search_id>")
@require_user
def delete_search(search_id: int):
    saved.delete_search(current_user().id, search_id)
    return "", 204
