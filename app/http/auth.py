"""Session login, logout, password change and the current user (IDN-1/2/3)."""

from __future__ import annotations

from flask import Blueprint, jsonify

from app.errors import RateLimited, Unauthorized, ValidationError
from app.http import context
from app.http.guards import (
    csrf_token,
    current_user,
    end_session,
    public,
    require_session,
    require_user,
    session_id,
    start_session,
)
from app.http.requests import json_body
from app.identity import service as identity
from app.identity.login_throttle import address_bucket, username_bucket
from app.json_input import checked_object
from app.observability import emit

blueprint = Blueprint("auth", __name__, url_prefix="/api/auth")


def _throttle(username: str | None) -> None:
    """Count this attempt per address and per username; 429 when either is over."""
    from flask_limiter.util import get_remote_address

    security = context.settings().security
    budgets = [(address_bucket(get_remote_address()), security.login_rate_limit)]
    if username is not None:
        budgets.append((username_bucket(username), security.login_username_rate_limit))
    retry_after = context.login_throttle().hit(budgets)
    if retry_after is not None:
        emit("LoginThrottled", retry_after=retry_after)
        raise RateLimited(
            "too many login attempts; retry later",
            details={"retry_after": retry_after},
            headers={"Retry-After": str(retry_after)},
        )


throttle_login = _throttle  # the web console's sign-in form counts against the same budgets


@blueprint.post("/login")
@public
def login():
    body = json_body()
    username, password = body.get("username"), body.get("password")
    _throttle(username if isinstance(username, str) else None)
    checked_object(body, ("username", "password"))  # counted first: no free probes
    if not isinstance(username, str) or not isinstance(password, str):
        raise ValidationError(
            "username and password are required strings",
            code="invalid_credentials_format",
            details={"fields": ["username", "password"]},
        )
    if len(username) > identity.MAX_LOGIN_USERNAME or len(password) > identity.MAX_LOGIN_PASSWORD:
        raise Unauthorized("invalid username or password", code="invalid_credentials")
    user = identity.check_credentials(username, password)
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
@require_session
def logout():
    emit("Logout", user_id=current_user().id)
    end_session()
    return "", 204


@blueprint.post("/password")
@require_session
def change_password():
    """Change one's own password: every session of the user ends, the caller gets a new one."""
    body = json_body()
    checked_object(body, {"current_password", "new_password"})
    # A body of the wrong shape is a 400 naming the field, before the throttle: it is
    # no guess at the password and must not read as a wrong one.
    for field in ("current_password", "new_password"):
        if not isinstance(body.get(field), str):
            raise ValidationError(f"{field} must be a string", details={"field": field})
    user = current_user()
    # Guessing the current password costs what guessing it at sign-in costs.
    _throttle(user.username)
    identity.change_own_password(user.id, body.get("current_password"), body.get("new_password"))
    token = start_session(user)
    emit("PasswordChanged", user_id=user.id)
    return jsonify({"user": user.public(), "csrf_token": token})


@blueprint.get("/sessions")
@require_session
def list_sessions():
    """One's live sessions (when each began and ends; ``current`` marks this one): this
    one first, then the newest 100, and ``total``."""
    items, total = identity.live_sessions(current_user().id, session_id() or "", limit=100)
    return jsonify({"items": items, "total": total})


@blueprint.post("/sessions/end-others")
@require_session
def end_other_sessions():
    """Sign out everywhere but here: every other session of the caller ends."""
    ended = identity.end_other_sessions(current_user(), session_id() or "", via="api")
    emit("OtherSessionsEnded", user_id=current_user().id, ended=ended)
    return jsonify({"ended": ended})


# -- personal API tokens (docs/security.md, "API tokens") --------------------------------
@blueprint.get("/tokens")
@require_user
def list_tokens():
    tokens = identity.list_api_tokens(current_user().id)
    return jsonify({"items": [token.public() for token in tokens]})


@blueprint.post("/tokens")
@require_session
def create_token():
    """A token for the caller's scripts: its secret is in this answer only."""
    token, secret = identity.create_api_token(current_user(), json_body(), via="api")
    emit("ApiTokenCreated", user_id=current_user().id, token_id=token.id)
    response = jsonify({"token": token.public(), "secret": secret})
    response.headers["Cache-Control"] = "no-store"
    return response, 201


@blueprint.delete("/tokens/<int:token_id>")
@require_user
def revoke_token(token_id: int):
    identity.revoke_api_token(current_user(), token_id, via="api")
    emit("ApiTokenRevoked", user_id=current_user().id, token_id=token_id)
    return "", 204
