"""The scanner fleet (docs/scanner-protocol.md, "Scanner status"): list and revoke.

``GET /api/scanners``: admins see every scanner, other users the scanners they created.
``POST /api/scanners/<id>/disable`` (admin, audited) revokes the scanner's token: its
next call answers 401. Routes only translate; the services own the transactions.
"""

from __future__ import annotations

from flask import Blueprint, jsonify

from app.http import context
from app.http.guards import current_user, require_admin, require_user
from app.identity.scanners import disable_scanner
from app.scan_control.fleet import list_fleet

blueprint = Blueprint("scanners_admin", __name__, url_prefix="/api")


@blueprint.get("/scanners")
@require_user
def list_scanners_route():
    items = list_fleet(
        current_user(), offline_seconds=context.settings().scan.scanner_offline_seconds
    )
    return jsonify({"items": items})


@blueprint.post("/scanners/<int:scanner_id>/disable")
@require_admin
def disable_scanner_route(scanner_id: int):
    scanner = disable_scanner(scanner_id, actor_user_id=current_user().id, via="api")
    return jsonify({**scanner.public(), "disabled": scanner.disabled})
