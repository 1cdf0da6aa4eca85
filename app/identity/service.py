"""Identity as the API, the console and the request guards use it.

Each function here is one short transaction of its own (docs/architecture.md, rule:
services own transactions); the HTTP routes and the console pages call the same
functions, so the two front ends share one path for signing in, sessions, users and
scanners. The functions taking a connection (``users``, ``scanners``, ``sessions``)
stay for callers that compose them into a larger transaction (the CLI, seeding, tests).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from app.db import transaction
from app.errors import Conflict, ValidationError
from app.identity import api_tokens, audit, scanners, sessions, users
from app.identity.audit import record_audit
from app.identity.scanners import Scanner, ScannerListing
from app.identity.user_record import User

# Longer credentials are refused without hashing (a cheap guard against slow-hash abuse).
MAX_LOGIN_USERNAME = 64
MAX_LOGIN_PASSWORD = 1024


# -- signing in and sessions ------------------------------------------------------------
def check_credentials(username: str, password: str) -> User | None:
    """The enabled user these credentials name, or None (over-long ones are refused unread)."""
    if len(username) > MAX_LOGIN_USERNAME or len(password) > MAX_LOGIN_PASSWORD:
        return None
    with transaction() as conn:
        return users.authenticate(conn, username, password)


def start_session(user_id: int, lifetime: timedelta) -> str:
    """A new server-side session for the user; returns its id (kept in the cookie)."""
    with transaction() as conn:
        return sessions.start_session(conn, user_id, lifetime)


def end_session(session_id: str) -> None:
    with transaction() as conn:
        sessions.end_session(conn, session_id)


def user_for_session(session_id: str, user_id: int) -> User | None:
    """The user of a live session, or None when it ended, expired or the user is disabled."""
    with transaction() as conn:
        return sessions.user_for_session(conn, session_id, user_id)


def audit_page(
    *,
    limit: int,
    before_id: int | None = None,
    action: str | None = None,
    actor: str | None = None,
) -> tuple[list[dict[str, Any]], int | None]:
    """One page of the audit trail (newest first) and where the next starts; ``actor`` is
    a username (an unknown one is a 400 naming the parameter)."""
    with transaction() as conn:
        actor_id = None
        if actor:
            found = users.find_by_username(conn, actor)
            if found is None:
                raise ValidationError(
                    f"no user is named {actor!r}",
                    code="invalid_parameter",
                    details={"parameter": "actor"},
                )
            actor_id = found.id
        return audit.audit_page(
            conn, limit=limit, before_id=before_id, action=action, actor_user_id=actor_id
        )


def live_sessions(
    user_id: int, current_session_id: str, *, limit: int = 50
) -> tuple[list[dict], int]:
    """The user's live sessions (the caller's first, then the newest) and how many."""
    with transaction() as conn:
        return sessions.live_sessions(conn, user_id, current_session_id, limit=limit)


def end_other_sessions(user: User, current_session_id: str, *, via: str) -> int:
    """Sign the user out everywhere but here (audited with how many sessions ended)."""
    with transaction() as conn:
        ended = sessions.end_other_sessions(conn, user.id, current_session_id)
        record_audit(
            conn,
            actor_user_id=user.id,
            action="user.sessions_end_others",
            target_type="user",
            target_id=user.id,
            details={"ended": ended, "via": via},
        )
    return ended


def change_own_password(
    user_id: int, current_password: Any, new_password: Any, *, via: str = "api"
) -> User:
    """A user changing their own password (every session of the user ends)."""
    with transaction() as conn:
        return users.change_own_password(conn, user_id, current_password, new_password, via=via)


def user_for_api_token(token: str) -> api_tokens.TokenUser | None:
    """The enabled user of a live personal API token (and its access), or None."""
    with transaction() as conn:
        return api_tokens.user_for_token(conn, token)


def create_api_token(user: User, body: Any, *, via: str) -> tuple[api_tokens.ApiToken, str]:
    """A new personal API token of ``user`` (audited) and its secret, shown once."""
    request = api_tokens.validate_token_request(body)
    with transaction() as conn:
        return api_tokens.create_token(conn, user, request, via=via, actor_user_id=user.id)


def list_api_tokens(user_id: int) -> list[api_tokens.ApiToken]:
    with transaction() as conn:
        return api_tokens.list_tokens(conn, user_id)


def revoke_api_token(user: User, token_id: int, *, via: str) -> None:
    with transaction() as conn:
        api_tokens.revoke_token(conn, user, token_id, via=via)


def authenticate_scanner(token: str) -> Scanner | None:
    with transaction() as conn:
        return scanners.authenticate_scanner(conn, token)


# -- administration (audited) ----------------------------------------------------------
def create_user(
    username: Any, password: Any, *, is_admin: bool, actor_user_id: int | None, via: str
) -> User:
    with transaction() as conn:
        return users.create_user_audited(
            conn, username, password, is_admin=is_admin, actor_user_id=actor_user_id, via=via
        )


def set_user_disabled(user_id: int, disabled: bool, *, actor: User, via: str) -> User:
    """Disable (ending every session) or enable a user; an admin cannot disable themself."""
    if disabled and user_id == actor.id:
        raise Conflict("an admin cannot disable their own account", code="cannot_disable_self")
    with transaction() as conn:
        return users.set_disabled(conn, user_id, disabled, actor_user_id=actor.id, via=via)


def list_users(*, limit: int, after_id: int | None = None) -> list[User]:
    with transaction() as conn:
        return users.list_users(conn, limit=limit, after_id=after_id)


def create_scanner(name: Any, *, actor_user_id: int | None, via: str) -> tuple[Scanner, str]:
    """A new scanner and its token (shown once)."""
    with transaction() as conn:
        return scanners.create_scanner_audited(conn, name, actor_user_id=actor_user_id, via=via)


def set_scanner_disabled(
    scanner_id: int, disabled: bool, *, actor_user_id: int | None, via: str
) -> Scanner:
    with transaction() as conn:
        return scanners.set_scanner_disabled_audited(
            conn, scanner_id, disabled, actor_user_id=actor_user_id, via=via
        )


def list_scanners(*, limit: int, after_id: int | None = None) -> list[ScannerListing]:
    with transaction() as conn:
        return scanners.list_scanners(conn, limit=limit, after_id=after_id)
