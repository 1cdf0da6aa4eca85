"""Users: creation, password checks and changes, disabling, lookups (IDN-1).

Passwords are hashed with Werkzeug's scrypt and must pass the password policy
(``password_policy``). Unknown usernames still pay for one hash check so
response time does not reveal which usernames exist. Changing a password or
disabling a user ends every session of that user in the same transaction.
"""

from __future__ import annotations

import re
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from werkzeug.security import check_password_hash, generate_password_hash

from app.errors import Conflict, NotFound, Unauthorized, ValidationError
from app.identity.password_policy import password_problem
from app.identity.user_record import User, _row_to_user

USERNAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
MIN_PASSWORD_LENGTH = 10
MAX_PASSWORD_LENGTH = 1024
_DUMMY_HASH = generate_password_hash("netmap-timing-equaliser", method="scrypt")


def password_problem_for(password: Any, username: str | None) -> str | None:
    """What is wrong with this password for this user (length rule, then the policy)."""
    if not isinstance(password, str) or not (
        MIN_PASSWORD_LENGTH <= len(password) <= MAX_PASSWORD_LENGTH
    ):
        return f"must be a string of {MIN_PASSWORD_LENGTH} to {MAX_PASSWORD_LENGTH} characters"
    return password_problem(password, username)


def validate_new_user(username: Any, password: Any) -> None:
    problems: dict[str, str] = {}
    if not isinstance(username, str) or not USERNAME_RE.match(username):
        problems["username"] = (
            "1-64 characters: ASCII letters, digits and . _ @ -, starting with a letter or digit"
        )
    problem = password_problem_for(password, username if isinstance(username, str) else None)
    if problem:
        problems["password"] = problem
    if problems:
        raise ValidationError("invalid user", code="invalid_user", details={"fields": problems})


def create_user(conn: Connection, username: str, password: str, *, is_admin: bool = False) -> User:
    validate_new_user(username, password)
    password_hash = generate_password_hash(password, method="scrypt")
    row = conn.execute(
        sa.text(
            """
            INSERT INTO users (username, password_hash, is_admin)
            VALUES (:username, :password_hash, :is_admin)
            ON CONFLICT DO NOTHING
            RETURNING id, username, is_admin, disabled
            """
        ),
        {"username": username, "password_hash": password_hash, "is_admin": bool(is_admin)},
    ).one_or_none()
    if row is None:
        raise Conflict(f"user {username!r} already exists", code="user_exists")
    return _row_to_user(row)


def create_user_audited(
    conn: Connection,
    username: str,
    password: str,
    *,
    is_admin: bool = False,
    actor_user_id: int | None,
    via: str,
) -> User:
    """Create a user and its audit row in the caller's transaction (IDN-6)."""
    from app.identity.audit import record_audit

    user = create_user(conn, username, password, is_admin=is_admin)
    record_audit(
        conn,
        actor_user_id=actor_user_id,
        action="user.create",
        target_type="user",
        target_id=user.id,
        details={"username": user.username, "is_admin": user.is_admin, "via": via},
    )
    return user


def authenticate(conn: Connection, username: str, password: str) -> User | None:
    row = conn.execute(
        sa.text(
            "SELECT id, username, is_admin, disabled, password_hash FROM users "
            "WHERE lower(username) = lower(:username)"
        ),
        {"username": username},
    ).one_or_none()
    if row is None:
        check_password_hash(_DUMMY_HASH, password)
        return None
    if not check_password_hash(row.password_hash, password) or row.disabled:
        return None
    return _row_to_user(row)


def get_user(conn: Connection, user_id: int) -> User | None:
    row = conn.execute(
        sa.text("SELECT id, username, is_admin, disabled FROM users WHERE id = :id"),
        {"id": user_id},
    ).one_or_none()
    return _row_to_user(row) if row else None


def find_by_username(conn: Connection, username: str) -> User | None:
    row = conn.execute(
        sa.text(
            "SELECT id, username, is_admin, disabled FROM users WHERE lower(username) = lower(:u)"
        ),
        {"u": username},
    ).one_or_none()
    return _row_to_user(row) if row else None


def set_password(
    conn: Connection,
    user_id: int,
    new_password: Any,
    *,
    actor_user_id: int | None,
    via: str,
    field: str = "password",
) -> tuple[User, int]:
    """Replace a user's password and end all of their sessions (audited); returns the
    user and how many sessions ended."""
    from app.identity.audit import record_audit
    from app.identity.sessions import end_user_sessions

    user = get_user(conn, user_id)
    if user is None:
        raise NotFound(f"user {user_id} not found", code="user_not_found")
    problem = password_problem_for(new_password, user.username)
    if problem:
        raise ValidationError(
            "invalid password", code="invalid_password", details={"fields": {field: problem}}
        )
    conn.execute(
        sa.text("UPDATE users SET password_hash = :hash, updated_at = now() WHERE id = :id"),
        {"hash": generate_password_hash(new_password, method="scrypt"), "id": user_id},
    )
    ended = end_user_sessions(conn, user_id)
    record_audit(
        conn,
        actor_user_id=actor_user_id,
        action="user.password_change",
        target_type="user",
        target_id=user_id,
        details={"via": via, "sessions_ended": ended},
    )
    return user, ended


def change_own_password(
    conn: Connection, user_id: int, current_password: Any, new_password: Any, *, via: str = "api"
) -> User:
    """A user changing their own password: the current one must be right."""
    row = conn.execute(
        sa.text("SELECT password_hash FROM users WHERE id = :id FOR UPDATE"), {"id": user_id}
    ).one_or_none()
    if (
        row is None
        or not isinstance(current_password, str)
        or len(current_password) > MAX_PASSWORD_LENGTH
        or not check_password_hash(row.password_hash, current_password)
    ):
        raise Unauthorized("the current password is wrong", code="invalid_credentials")
    if new_password == current_password:
        # A change that changes nothing would still end every other session: refused.
        raise ValidationError(
            "invalid password",
            code="invalid_password",
            details={"fields": {"new_password": "must differ from the current password"}},
        )
    user, _ended = set_password(
        conn, user_id, new_password, actor_user_id=user_id, via=via, field="new_password"
    )
    return user


def set_disabled(
    conn: Connection, user_id: int, disabled: bool, *, actor_user_id: int | None, via: str
) -> User:
    """Disable (ending every session) or enable a user (audited)."""
    from app.identity.audit import record_audit
    from app.identity.sessions import end_user_sessions

    row = conn.execute(
        sa.text(
            """
            WITH old AS (SELECT disabled FROM users WHERE id = :id FOR UPDATE)
            UPDATE users u SET disabled = :disabled, updated_at = now()
              FROM old WHERE u.id = :id
            RETURNING u.id, u.username, u.is_admin, u.disabled, old.disabled AS was_disabled
            """
        ),
        {"disabled": disabled, "id": user_id},
    ).one_or_none()
    if row is None:
        raise NotFound(f"user {user_id} not found", code="user_not_found")
    ended = end_user_sessions(conn, user_id) if disabled else 0
    if row.was_disabled == disabled:  # asked again: nothing changed, nothing to audit
        return _row_to_user(row)
    record_audit(
        conn,
        actor_user_id=actor_user_id,
        action="user.disable" if disabled else "user.enable",
        target_type="user",
        target_id=user_id,
        details={"via": via, "sessions_ended": ended},
    )
    return _row_to_user(row)


def list_users(conn: Connection, *, limit: int, after_id: int | None = None) -> list[User]:
    """Users by id (keyset: ``after_id`` is the last id of the previous page)."""
    rows = conn.execute(
        sa.text(
            "SELECT id, username, is_admin, disabled FROM users "
            "WHERE id > :after_id ORDER BY id LIMIT :limit"
        ),
        {"after_id": after_id or 0, "limit": limit},
    ).all()
    return [_row_to_user(r) for r in rows]
