"""Saved searches (``/api/searches``): named search-language queries, owner-scoped.

``GET /api/assets?search=<id>`` runs one (``app.http.assets``); the console's asset
page lists them beside its search box.
"""

from __future__ import annotations

from flask import Blueprint, jsonify

from app.db import transaction
from app.errors import NotFound
from app.http.guards import current_user, require_user
from app.http.requests import decode_cursor, encode_cursor, json_body, page_limit
from app.saved_searches import records

blueprint = Blueprint("searches", __name__, url_prefix="/api")


def _not_found() -> NotFound:
    return NotFound("saved search not found", code="search_not_found")


@blueprint.get("/searches")
@require_user
def list_searches():
    limit = page_limit()
    cursor = decode_cursor()
    after = int(cursor["id"]) if cursor else None
    with transaction() as conn:
        rows = records.list_for(conn, current_user().id, limit=limit + 1, after_id=after)
    more = len(rows) > limit
    rows = rows[:limit]
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
    with transaction() as conn:
        row = records.create(conn, current_user().id, values)
    return jsonify({"search": records.search_dict(row)}), 201


@blueprint.get("/searches/<int:search_id>")
@require_user
def get_search(search_id: int):
    with transaction() as conn:
        row = records.get(conn, current_user().id, search_id)
    if row is None:
        raise _not_found()
    return jsonify({"search": records.search_dict(row)})


@blueprint.patch("/searches/<int:search_id>")
@require_user
def update_search(search_id: int):
    values = records.validate(json_body(), partial=True)
    with transaction() as conn:
        row = records.update(conn, current_user().id, search_id, values)
    if row is None:
        raise _not_found()
    return jsonify({"search": records.search_dict(row)})


@blueprint.delete("/searches/<int:search_id>")
@require_user
def delete_search(search_id: int):
    with transaction() as conn:
        deleted = records.delete(conn, current_user().id, search_id)
    if not deleted:
        raise _not_found()
    return "", 204
