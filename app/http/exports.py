"""Export routes (EXP-7, EXP-10) and the filesystem store's signed download route (EXP-3).

Thin: requests become ``app.exports.service`` calls. ``GET /api/objects/<token>``
is public because the token is the credential: a signed, expiring link made by
the filesystem store for one object (what a presigned URL is on S3).
"""

from __future__ import annotations

import mimetypes
import re

from flask import Blueprint, Response, jsonify

from app.errors import Forbidden, NotFound
from app.exports import records, service
from app.http import context
from app.http.guards import current_user, public, require_user
from app.http.requests import decode_cursor, encode_cursor, int_arg, json_body, page_limit
from app.object_store.port import ObjectNotFound, iter_chunks

blueprint = Blueprint("exports", __name__)

_SAFE_FILENAME = re.compile(r"[A-Za-z0-9._-]{1,128}")


@blueprint.post("/api/tasks/<int:task_id>/exports")
@require_user
def create_export_route(task_id: int):
    export = service.request_export(
        current_user(),
        task_id,
        json_body(),
        max_queued=context.settings().exports.max_queued_per_user,
        run_id=int_arg("run", minimum=1),
    )
    export["download_url"] = None
    return jsonify({"export": export}), 202


@blueprint.post("/api/exports")
@require_user
def create_query_export_route():
    """An export of the caller's current assets found by a search-language query."""
    export = service.request_query_export(
        current_user(),
        json_body(),
        max_queued=context.settings().exports.max_queued_per_user,
    )
    export["download_url"] = None
    return jsonify({"export": export}), 202


@blueprint.get("/api/exports")
@require_user
def list_exports_route():
    limit = page_limit()
    cursor = decode_cursor()
    after = int(cursor["id"]) if cursor else None
    items, next_id = service.list_exports(
        context.settings(), context.object_store(), current_user().id, limit=limit, after_id=after
    )
    return jsonify(
        {
            "items": items,
            "next_cursor": encode_cursor({"id": next_id}) if next_id else None,
        }
    )


@blueprint.get("/api/exports/<int:export_id>")
@require_user
def get_export_route(export_id: int):
    row = service.find_export(current_user(), export_id)
    return jsonify({"export": service.describe(context.settings(), row, context.object_store())})


@blueprint.delete("/api/exports/<int:export_id>")
@require_user
def delete_export_route(export_id: int):
    row, results = service.delete_export(
        context.settings(), current_user(), export_id, context.object_store()
    )
    export = records.export_dict(row)
    export["status"] = "deleted"
    export["download_url"] = None
    return jsonify({"export": export, "objects": [r.as_dict() for r in results]})


@blueprint.get("/api/objects/<token>")
@public
def download_object_route(token: str):
    from app.object_store.filesystem import DownloadLinkInvalid, read_download_token

    settings = context.settings()
    if settings.object_store.backend != "filesystem":
        raise NotFound("downloads are served by the object store", code="not_found")
    try:
        payload = read_download_token(settings.security.secret_key, token)
    except (DownloadLinkInvalid, ValueError) as exc:
        reason = getattr(exc, "reason", "bad_signature")
        raise Forbidden(
            "the download link is invalid or has expired", code=f"download_link_{reason}"
        ) from None
    store = context.object_store()
    key = payload["k"]
    try:
        size = store.size(key)
        handle = store.open(key)
    except ObjectNotFound:
        raise NotFound("the object no longer exists", code="object_not_found") from None
    filename = payload.get("f") or key.rsplit("/", 1)[-1]
    if not _SAFE_FILENAME.fullmatch(filename):
        filename = "download"
    mimetype = mimetypes.guess_type(filename)[0] or "application/octet-stream"

    def body():
        with handle:
            yield from iter_chunks(handle, 256 * 1024)

    return Response(
        body(),
        mimetype=mimetype,
        headers={
            "Content-Length": str(size),
            "Content-Disposition": f'attachment; filename="{filename}"',
            "Cache-Control": "private, no-store",
        },
    )
