"""Personal API tokens (``user_api_tokens``): a user's own bearer credential for scripts.

A token is shown once, when made; the table keeps its SHA-256 (as for scanner tokens and
sessions) and its last four characters as a hint. It authenticates its user on the API's
user routes while its row exists, it has not expired and the user is enabled; revoking
deletes the row, so the next request fails. Making and revoking one are audited.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from app.errors import Conflict, NotFound, ValidationError
from app.identity.audit import record_audit
from app.identity.scanners import token_digest
from app.identity.user_record import User, _row_to_user
from app.json_input import checked_name, checked_object

TOKEN_PREFIX = "nmu_"  # noqa: S105 - a recognisable prefix, not a secret
MAX_TOKENS_PER_USER = 50
MAX_EXPIRY_DAYS = 3650
# last_used_at is a hint for the token list, not a log: one write a minute at most.
LAST_USED_RESOLUTION_SECONDS = 60


@dataclass(frozen=True)
class ApiToken:
    id: int
    name: str
    hint: str
    access: str  # "write" (any request the user may make) or "read" (GET and HEAD only)
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None

    def public(self) -> dict[str, Any]:
        def iso(value: datetime | None) -> str | None:
            return value.isoformat() if value else None

        return {
            "id": self.id,
            "name": self.name,
            "hint": self.hint,
            "access": self.access,
            "created_at": iso(self.created_at),
            "expires_at": iso(self.expires_at),
            "last_used_at": iso(self.last_used_at),
        }


_COLUMNS = "id, name, hint, access, created_at, expires_at, last_used_at"
ACCESS = ("write", "read")


def _token(row: Any) -> ApiToken:
    return ApiToken(**row._mapping)  # _COLUMNS are the dataclass's fields, by name


@dataclass(frozen=True)
class TokenRequest:
    name: str
    expires_in_days: int | None
    access: str


@dataclass(frozen=True)
class TokenUser:
    """Whom a live token authenticates, and what it may do."""

    user: User
    access: str


def validate_token_request(body: Any) -> TokenRequest:
    """``name`` (1-100 characters), ``expires_in_days`` (1-3650, or null/absent: the token
    does not expire) and ``access`` (``write``, the default, or ``read``) of
    ``POST /api/auth/tokens``."""
    checked_object(body, {"name", "expires_in_days", "access"})
    name = checked_name(body.get("name"), max_chars=100)
    days = body.get("expires_in_days")
    if days is not None and (
        isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= MAX_EXPIRY_DAYS
    ):
        raise ValidationError(
            f"expires_in_days must be a whole number of days from 1 to {MAX_EXPIRY_DAYS}, "
            "or null for a token that does not expire",
            details={"field": "expires_in_days"},
        )
    access = body.get("access", "write")
    if access not in ACCESS:
        raise ValidationError(
            "access must be write (any request you may make) or read (GET and HEAD only)",
            details={"field": "access"},
        )
    return TokenRequest(name=name, expires_in_days=days, access=access)


def create_token(
    conn: Connection,
    user: User,
    request: TokenRequest,
    *,
    via: str,
    actor_user_id: int | None,
) -> tuple[ApiToken, str]:
    """A new token of ``user`` and its secret (shown once, never stored). The audit row
    names ``actor_user_id``: the user, or None for the operator's CLI."""
    # The user's row lock serialises two requests at the cap.
    conn.execute(sa.text("SELECT 1 FROM users WHERE id = :u FOR UPDATE"), {"u": user.id})
    held = conn.execute(
        sa.text("SELECT count(*) FROM user_api_tokens WHERE user_id = :u"), {"u": user.id}
    ).scalar_one()
    if held >= MAX_TOKENS_PER_USER:
        raise Conflict(
            f"you have {held} API tokens, the most one may hold; revoke one first",
            code="too_many_tokens",
            details={"limit": MAX_TOKENS_PER_USER},
        )
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    try:
        with conn.begin_nested():
            row = conn.execute(
                sa.text(
                    f"""
                    INSERT INTO user_api_tokens
                        (user_id, name, token_sha256, hint, access, expires_at)
                    VALUES (:u, :name, :digest, :hint, :access,
                            now() + make_interval(days => CAST(:days AS integer)))
                    RETURNING {_COLUMNS}
                    """  # noqa: S608 - a fixed column list; values are bound
                ),
                {
                    "u": user.id,
                    "name": request.name,
                    "digest": token_digest(secret),
                    "hint": secret[-4:],
                    "access": request.access,
                    "days": request.expires_in_days,
                },
            ).one()
    except IntegrityError:
        raise Conflict(
            f"an API token named {request.name!r} exists already for this user",
            code="duplicate_name",
            details={"field": "name"},
        ) from None
    token = _token(row)
    record_audit(
        conn,
        actor_user_id=actor_user_id,
        action="api_token.create",
        target_type="api_token",
        target_id=token.id,
        details={
            "name": request.name,
            "access": request.access,
            "expires_in_days": request.expires_in_days,
            "via": via,
        },
    )
    return token, secret


def list_tokens(conn: Connection, user_id: int) -> list[ApiToken]:
    rows = conn.execute(
        sa.text(
            f"SELECT {_COLUMNS} FROM user_api_tokens WHERE user_id = :u ORDER BY id"  # noqa: S608
        ),
        {"u": user_id},
    ).all()
    return [_token(row) for row in rows]


def revoke_token(conn: Connection, user: User, token_id: int, *, via: str) -> None:
    """Delete one of the user's tokens (another user's is not found: 404)."""
    name = conn.execute(
        sa.text("DELETE FROM user_api_tokens WHERE id = :id AND user_id = :u RETURNING name"),
        {"id": token_id, "u": user.id},
    ).scalar_one_or_none()
    if name is None:
        raise NotFound("API token not found", code="token_not_found")
    record_audit(
        conn,
        actor_user_id=user.id,
        action="api_token.revoke",
        target_type="api_token",
        target_id=token_id,
        details={"name": name, "via": via},
    )


def user_for_token(conn: Connection, token: str) -> TokenUser | None:
    """The enabled user of a live token and the token's access, or None (unknown,
    revoked, expired, disabled, or not a user token at all: a scanner's is refused)."""
    if not token.startswith(TOKEN_PREFIX) or len(token) > 256:
        return None
    # One statement whether or not last_used_at is due (as for scanners' last_seen_at).
    row = conn.execute(
        sa.text(
            f"""
            WITH live AS (
                SELECT t.id, t.access, u.id AS user_id, u.username, u.is_admin, u.disabled,
                       t.last_used_at
                FROM user_api_tokens t JOIN users u ON u.id = t.user_id
                WHERE t.token_sha256 = :digest AND NOT u.disabled
                  AND (t.expires_at IS NULL OR t.expires_at > now())
            ), touched AS (
                UPDATE user_api_tokens SET last_used_at = now()
                WHERE id = (SELECT id FROM live)
                  AND (last_used_at IS NULL
                       OR last_used_at < now() - interval '{LAST_USED_RESOLUTION_SECONDS} seconds')
                RETURNING id
            )
            SELECT user_id AS id, username, is_admin, disabled, access FROM live
            """  # noqa: S608 - the interval is a module constant
        ),
        {"digest": token_digest(token)},
    ).one_or_none()
    return TokenUser(user=_row_to_user(row), access=row.access) if row else None
