"""The scanner upload route (ING): POST /api/scanner/executions/<id>/uploads."""

from __future__ import annotations

from flask import Blueprint, g, jsonify

from app.http import context
from app.http.guards import current_scanner, require_scanner
from app.http.requests import request_body
from app.json_input import decode_json
from app.result_ingest.service import handle_upload

blueprint = Blueprint("uploads", __name__, url_prefix="/api/scanner")


@blueprint.post("/executions/<int:execution_id>/uploads")
@require_scanner
def upload(execution_id: int):
    # The body is read before the slot (a slow client's bytes are I/O, not CPU) and
    # decoded inside it (decoding is CPU work like the rest).
    body = request_body(cache=False)
    with context.upload_gate().slot():
        raw = decode_json(body)
        result = handle_upload(
            settings=context.settings(),
            store=context.store(),
            execution_id=execution_id,
            scanner_id=current_scanner().id,
            raw=raw,
            request_id=g.get("request_id"),
        )
    return jsonify({"success": True, "saved": result.saved})
