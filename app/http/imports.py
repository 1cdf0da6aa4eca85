"""Result-file imports: POST /api/tasks/<id>/imports (AGT-7).

The body is the file itself (raw) or a multipart form with a ``file`` part;
``format`` comes from the query string (or a form field). The body is copied
to a temporary file as it arrives — never held in memory — and refused with
413 past ``[agent] import_max_bytes``; the import service then reads it twice
(validate, upload), so a bad file writes nothing.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import IO

from flask import Blueprint, g, jsonify, request

from app.errors import PayloadTooLarge, ValidationError
from app.http import context
from app.http.guards import current_user, require_user
from app.result_ingest.imports import check_format, import_results

blueprint = Blueprint("imports", __name__, url_prefix="/api/tasks")
COPY_BYTES = 1024 * 1024


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"the file is larger than {limit} bytes ([agent] import_max_bytes)",
        code="import_too_large",
        details={"limit_bytes": limit},
    )


def _copy(source: IO[bytes], target: IO[bytes], limit: int) -> int:
    copied = 0
    while True:
        chunk = source.read(COPY_BYTES)
        if not chunk:
            return copied
        copied += len(chunk)
        if copied > limit:
            raise _too_large(limit)
        target.write(chunk)


@blueprint.post("/<int:task_id>/imports")
@require_user
def import_route(task_id: int):
    settings = context.settings()
    limit = settings.agent.import_max_bytes
    if request.content_length is not None and request.content_length > limit:
        raise _too_large(limit)
    # The app-wide body limit is the upload route's; an import may be much larger.
    request.max_content_length = limit
    multipart = request.mimetype == "multipart/form-data"
    format_name = request.args.get("format")
    if format_name is None and multipart:
        format_name = request.form.get("format")
    check_format(format_name)
    with tempfile.TemporaryDirectory(prefix="netmap-import-") as directory:
        path = Path(directory) / "upload"
        with open(path, "wb") as target:
            if multipart:
                part = request.files.get("file")
                if part is None:
                    raise ValidationError(
                        "multipart imports carry the file in a part named 'file'",
                        code="invalid_import_file",
                        details={"field": "file"},
                    )
                size = _copy(part.stream, target, limit)
            else:
                size = _copy(request.stream, target, limit)
        if size == 0:
            raise ValidationError(
                "the import body is empty", code="invalid_import_file", details={"field": "file"}
            )
        result = import_results(
            settings=settings,
            store=context.store(),
            user=current_user(),
            task_id=task_id,
            path=path,
            format_name=format_name,  # type: ignore[arg-type]
            observed_at_mode=request.args.get("observed_at", "file"),
            scope_mode=request.args.get("scope", "check"),
            request_id=g.get("request_id"),
        )
    return jsonify({"import": {**result.public(), "bytes": size}}), 201
