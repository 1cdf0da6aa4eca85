"""Server-side login sessions (IDN-1): one row per logged-in browser.

The signed session cookie carries a random session id; the database keeps only
its SHA-256, the user and an expiry. Every authenticated request looks the row
up, so ending a session is deleting its row: logout ends that browser's
session, a password change or disabling the user ends all of the user's
sessions, and a copied cookie stops working with the original.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.identity.user_record import User, _row_to_user


def _digest(session_id: str) -> bytes:
    return hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).digest()


def start_session(conn: Connection, user_id: int, lifetime: timedelta) -> str:
    """A new session for the user; returns the id the cookie carries (never stored)."""
    session_id = secrets.token_urlsafe(32)
    # Expired rows of this user go at the same time, so the table stays small
    # without a sweeper job.
    conn.execute(
        sa.text("DELETE FROM user_sessions WHERE user_id = :uid AND expires_at <= now()"),
        {"uid": user_id},
    )
    conn.execute(
        sa.text(
            "INSERT INTO user_sessions (id_sha256, user_id, expires_at) "
            "VALUES (:id, :uid, now() + make_interval(secs => :secs))"
        ),
        {"id": _digest(session_id), "uid": user_id, "secs": lifetime.total_seconds()},
    )
    return session_id


def user_for_session(conn: Connection, session_id: str, user_id: int) -> User | None:
    """The enabled user of a live session, or None (unknown, ended, expired, disabled)."""
    row = conn.execute(
        sa.text(
            """
            SELECT u.id, u.username, u.is_admin, u.disabled
            FROM user_sessions s JOIN users u ON u.id = s.user_id
            WHERE s.id_sha256 = :id AND s.user_id = :uid AND s.expires_at > now()
              AND NOT u.disabled
            """
        ),
        {"id": _digest(session_id), "uid": user_id},
    ).one_or_none()
    return _row_to_user(row) if row else None


def end_session(conn: Connection, session_id: str) -> None:
    conn.execute(
        sa.text("DELETE FROM user_sessions WHERE id_sha256 = :id"), {"id": _digest(session_id)}
    )


def end_user_sessions(conn: Connection, user_id: int) -> int:
    """End every session of a user; returns how many there were."""
    return conn.execute(
        sa.text("DELETE FROM user_sessions WHERE user_id = :uid"), {"uid": user_id}
    ).rowcount


def live_sessions(
    conn: Connection, user_id: int, current_session_id: str, *, limit: int = 50
) -> tuple[list[dict], int]:
    """The user's live sessions, the caller's first, then the newest (at most ``limit``),
    and how many there are: when each began and ends, and which one is the caller's (the
    only way to tell them apart: nothing else about a browser is kept)."""
    rows = conn.execute(
        sa.text(
            "SELECT id_sha256 = :current AS current, created_at, expires_at, "
            "count(*) OVER () AS total FROM user_sessions "
            "WHERE user_id = :uid AND expires_at > now() "
            "ORDER BY id_sha256 = :current DESC, created_at DESC, id_sha256 LIMIT :limit"
        ),
        {"uid": user_id, "current": _digest(current_session_id), "limit": limit},
    ).all()
    items = [
        {
            "current": row.current,
            "created_at": row.created_at.isoformat(),
            "expires_at": row.expires_at.isoformat(),
        }
        for row in rows
    ]
    return items, int(rows[0].total) if rows else 0


def end_other_sessions(conn: Connection, user_id: int, current_session_id: str) -> int:
    """End every session of the user but the caller's; returns how many ended."""
    return conn.execute(
        sa.text("DELETE FROM user_sessions WHERE user_id = :uid AND id_sha256 <> :current"),
        {"uid": user_id, "current": _digest(current_session_id)},
    ).rowcount
