"""Admin routes: users and scanners (session + CSRF + admin + rate limit, audited), and
the audit trail itself.

Disabling a user ends every session of that user at once (IDN-1).
"""

from __future__ import annotations

from flask import Blueprint, jsonify, request

from app.errors import ValidationError
from app.http.guards import current_user, require_admin
from app.http.requests import decode_cursor, encode_cursor, json_body, page_limit
from app.identity import service as identity
from app.json_input import checked_object
from app.parameters import text_param

blueprint = Blueprint("admin", __name__, url_prefix="/api")


@blueprint.post("/users")
@require_admin
def create_user_route():
    body = json_body()
    # A misspelt field ("is_amdin") must not quietly make a user without it.
    checked_object(body, {"username", "password", "is_admin"})
    is_admin = body.get("is_admin", False)
    if not isinstance(is_admin, bool):
        raise ValidationError(
            "invalid user",
            code="invalid_user",
            details={"fields": {"is_admin": "must be true or false"}},
        )
    actor = current_user()
    user = identity.create_user(
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
    checked_object(body, {"name"})
    actor = current_user()
    scanner, token = identity.create_scanner(body.get("name"), actor_user_id=actor.id, via="api")
    return jsonify({"id": scanner.id, "name": scanner.name, "token": token}), 201


def _set_disabled(user_id: int, disabled: bool):
    user = identity.set_user_disabled(user_id, disabled, actor=current_user(), via="api")
    return jsonify({**user.public(), "disabled": user.disabled})


@blueprint.post("/users/<int:user_id>/disable")
@require_admin
def disable_user_route(user_id: int):
    return _set_disabled(user_id, True)


@blueprint.post("/users/<int:user_id>/enable")
@require_admin
def enable_user_route(user_id: int):
    return _set_disabled(user_id, False)


@blueprint.get("/audit")
@require_admin
def audit_route():
    """The audit trail, newest first: ``action`` (one, or a family such as ``user``) and
    ``actor`` (a username) narrow it; keyset pages."""
    items, next_id = audit_page_from(limit=page_limit())
    cursor = encode_cursor({"before": next_id}) if next_id is not None else None
    return jsonify({"items": items, "next_cursor": cursor})


def audit_page_from(*, limit: int) -> tuple[list[dict], int | None]:
    """The audit page a request's ``action``, ``actor`` and ``cursor`` ask for (shared
    with the console's audit page)."""
    cursor = decode_cursor()
    return identity.audit_page(
        limit=limit,
        before_id=int(cursor["before"]) if cursor else None,
        action=text_param(request.args, "action", 100),
        actor=text_param(request.args, "actor", 64),
    )
