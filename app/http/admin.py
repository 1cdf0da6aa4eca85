"""Admin routes: users and scanners (session + CSRF + admin + rate limit, audited).

Disabling a user ends every session of that user at once (IDN-1).
"""

from __future__ import annotations

from flask import Blueprint, jsonify

from app.db import transaction
from app.errors import Conflict, ValidationError
from app.http.guards import current_user, require_admin
from app.http.requests import json_body
from app.identity.scanners import create_scanner_audited
from app.identity.users import create_user_audited, set_disabled

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


def _set_disabled(user_id: int, disabled: bool):
    actor = current_user()
    if disabled and user_id == actor.id:
        raise Conflict("an admin cannot disable their own account", code="cannot_disable_self")
    with transaction() as conn:
        user = set_disabled(conn, user_id, disabled, actor_user_id=actor.id, via="api")
    return jsonify({**user.public(), "disabled": user.disabled})


@blueprint.post("/users/<int:user_id>/disable")
@require_admin
def disable_user_route(user_id: int):
    return _set_disabled(user_id, True)


@blueprint.post("/users/<int:user_id>/enable")
@require_admin
def enable_user_route(user_id: int):
    return _set_disabled(user_id, False)
