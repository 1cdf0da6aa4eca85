"""Scanner identities and bearer tokens (IDN-4).

A token is 32 random bytes, shown once at creation; only its SHA-256 is
stored, so a database dump does not hand out scanner credentials. Lookup is a
unique-index probe on the digest (constant work whatever the token).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.errors import Conflict, ValidationError

TOKEN_PREFIX = "nms_"  # noqa: S105 - a recognisable prefix, not a secret
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._:@-]{0,127}$")
# last_seen_at is a convenience; write it at most this often per scanner.
LAST_SEEN_RESOLUTION_SECONDS = 60


@dataclass(frozen=True)
class Scanner:
    id: int
    name: str
    disabled: bool

    def public(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name}


def token_digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def create_scanner(
    conn: Connection, name: str, *, created_by: int | None = None
) -> tuple[Scanner, str]:
    """Returns the scanner and its token (the only time the token exists in clear)."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ValidationError(
            "invalid scanner name",
            code="invalid_scanner",
            details={"fields": {"name": "1-128 characters: letters, digits, space and . _ : @ -"}},
        )
    token = new_token()
    row = conn.execute(
        sa.text(
            """
            INSERT INTO scanners (name, token_sha256, created_by)
            VALUES (:name, :digest, :created_by)
            ON CONFLICT DO NOTHING
            RETURNING id, name, disabled
            """
        ),
        {"name": name, "digest": token_digest(token), "created_by": created_by},
    ).one_or_none()
    if row is None:
        raise Conflict(f"scanner {name!r} already exists", code="scanner_exists")
    return Scanner(id=row.id, name=row.name, disabled=row.disabled), token


def create_scanner_audited(
    conn: Connection, name: str, *, actor_user_id: int | None, via: str
) -> tuple[Scanner, str]:
    """Create a scanner and its audit row in the caller's transaction (IDN-6)."""
    from app.identity.audit import record_audit

    scanner, token = create_scanner(conn, name, created_by=actor_user_id)
    record_audit(
        conn,
        actor_user_id=actor_user_id,
        action="scanner.create",
        target_type="scanner",
        target_id=scanner.id,
        details={"name": scanner.name, "via": via},
    )
    return scanner, token


def authenticate_scanner(conn: Connection, token: str) -> Scanner | None:
    if not token.startswith(TOKEN_PREFIX) or len(token) > 256:
        return None
    # One statement whether or not last_seen_at is due for a refresh (it is refreshed at most
    # every LAST_SEEN_RESOLUTION_SECONDS): the data-modifying CTE touches the row when due, the
    # outer SELECT reads it either way, so an upload's statement count never depends on timing.
    row = conn.execute(
        sa.text(
            f"""
            WITH touched AS (
                UPDATE scanners SET last_seen_at = now()
                WHERE token_sha256 = :digest AND NOT disabled
                  AND (last_seen_at IS NULL
                       OR last_seen_at < now() - interval '{LAST_SEEN_RESOLUTION_SECONDS} seconds')
                RETURNING id
            )
            SELECT id, name, disabled FROM scanners
            WHERE token_sha256 = :digest AND NOT disabled
            """  # noqa: S608 - the interval is a module constant
        ),
        {"digest": token_digest(token)},
    ).one_or_none()
    return Scanner(id=row.id, name=row.name, disabled=row.disabled) if row else None


@dataclass(frozen=True)
class ScannerListing:
    id: int
    name: str
    disabled: bool
    created_at: Any
    last_seen_at: Any


def list_scanners(
    conn: Connection, *, limit: int, after_id: int | None = None
) -> list[ScannerListing]:
    """Scanners by id for the admin console (keyset on id); never the token digest."""
    rows = conn.execute(
        sa.text(
            "SELECT id, name, disabled, created_at, last_seen_at FROM scanners "
            "WHERE id > :after_id ORDER BY id LIMIT :limit"
        ),
        {"after_id": after_id or 0, "limit": limit},
    ).all()
    return [ScannerListing(r.id, r.name, r.disabled, r.created_at, r.last_seen_at) for r in rows]


def set_scanner_disabled_audited(
    conn: Connection, scanner_id: int, disabled: bool, *, actor_user_id: int | None, via: str
) -> Scanner:
    """Revoke (or restore) a scanner's token: a disabled scanner authenticates no more."""
    from app.errors import NotFound
    from app.identity.audit import record_audit

    row = conn.execute(
        sa.text(
            "UPDATE scanners SET disabled = :disabled WHERE id = :id RETURNING id, name, disabled"
        ),
        {"disabled": disabled, "id": scanner_id},
    ).one_or_none()
    if row is None:
        raise NotFound(f"scanner {scanner_id} not found", code="scanner_not_found")
    record_audit(
        conn,
        actor_user_id=actor_user_id,
        action="scanner.disable" if disabled else "scanner.enable",
        target_type="scanner",
        target_id=scanner_id,
        details={"name": row.name, "via": via},
    )
    return Scanner(id=row.id, name=row.name, disabled=row.disabled)
