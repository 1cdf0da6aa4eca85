"""Session login, logout and the current user (IDN-1/2)."""

from __future__ import annotations

from flask import Blueprint, jsonify, session

from app.db import transaction
from app.errors import Unauthorized, ValidationError
from app.http.guards import csrf_token, current_user, public, require_user, start_session
from app.http.ratelimit import limiter, login_limit
from app.http.requests import json_body
from app.identity.users import authenticate
from app.observability import emit

blueprint = Blueprint("auth", __name__, url_prefix="/api/auth")


@blueprint.post("/login")
@limiter.limit(login_limit)
@public
def login():
    body = json_body()
    username, password = body.get("username"), body.get("password")
    if not isinstance(username, str) or not isinstance(password, str):
        raise ValidationError(
            "username and password are required strings",
            code="invalid_credentials_format",
            details={"fields": ["username", "password"]},
        )
    if len(username) > 64 or len(password) > 1024:
        raise Unauthorized("invalid username or password", code="invalid_credentials")
    with transaction() as conn:
        user = authenticate(conn, username, password)
    if user is None:
        emit("LoginFailed")
        raise Unauthorized("invalid username or password", code="invalid_credentials")
    token = start_session(user)
    emit("LoginSucceeded", user_id=user.id)
    return jsonify({"user": user.public(), "csrf_token": token})


@blueprint.get("/me")
@require_user
def me():
    return jsonify({"user": current_user().public(), "csrf_token": csrf_token()})


@blueprint.post("/logout")
@require_user
def logout():
    emit("Logout", user_id=current_user().id)
    session.clear()
    return "", 204
