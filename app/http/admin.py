"""Admin routes: users and scanners (session + CSRF + admin + rate limit, audited)."""

from __future__ import annotations

from flask import Blueprint, jsonify

from app.db import transaction
from app.errors import ValidationError
from app.http.guards import current_user, require_admin
from app.http.requests import json_body
from app.identity.scanners import create_scanner_audited
from app.identity.users import create_user_audited

blueprint = Blueprint("admin", __name__, url_prefix="/api")


@blueprint.post("/users")
@require_admin
def create_user_route():
    body = json_body()
    is_admin = body.get("is_admin", False)
    if not isinstance(is_admin, bool):
        raise ValidationError("is_admin must be true or false", code="invalid_user")
    actor = current_user()
    with transaction() as conn:
        user = create_user_audited(
            conn,
            body.get("username"),
            body.get("password"),
            is_admin=is_admin,
            actor_user_id=actor.id,
            via="api",
        )
    return jsonify(user.public()), 201


@blueprint.post("/scanners")
@require_admin
def create_scanner_route():
    body = json_body()
    actor = current_user()
    with transaction() as conn:
        scanner, token = create_scanner_audited(
            conn, body.get("name"), actor_user_id=actor.id, via="api"
        )
    return jsonify({"id": scanner.id, "name": scanner.name, "token": token}), 201
