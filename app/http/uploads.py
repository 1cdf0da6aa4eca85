"""The scanner upload route (ING): POST /api/scanner/executions/<id>/uploads."""

from __future__ import annotations

import json

from flask import Blueprint, g, jsonify, request

from app.errors import ValidationError
from app.http import context
from app.http.guards import current_scanner, require_scanner
from app.result_ingest.service import handle_upload

blueprint = Blueprint("uploads", __name__, url_prefix="/api/scanner")


@blueprint.post("/executions/<int:execution_id>/uploads")
@require_scanner
def upload(execution_id: int):
    try:
        raw = json.loads(request.get_data(cache=False) or b"null")
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValidationError(f"body is not valid JSON: {exc}", code="invalid_json") from None
    result = handle_upload(
        settings=context.settings(),
        store=context.store(),
        execution_id=execution_id,
        scanner_id=current_scanner().id,
        raw=raw,
        request_id=g.get("request_id"),
    )
    return jsonify({"success": True, "saved": result.saved})
