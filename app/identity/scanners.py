"""Scanner identities and bearer tokens (IDN-4).

A token is 32 random bytes, shown once at creation; only its SHA-256 is
stored, so a database dump does not hand out scanner credentials. Lookup is a
unique-index probe on the digest (constant work whatever the token).
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.errors import Conflict, ValidationError

TOKEN_PREFIX = "nms_"  # noqa: S105 - a recognisable prefix, not a secret
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._:@-]{0,127}$")
# last_seen_at is the scanner's sign of life (the fleet's online/offline status, the
# scanner_offline alerts); write it at most this often per scanner, so an idle agent's
# claim polls do not each write the row.
LAST_SEEN_RESOLUTION_SECONDS = 5
# What an agent may say about itself (claim and renewal bodies' ``agent`` object).
MAX_ENGINES = 8
_ENGINE_NAME_RE = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")


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
            details={
                "fields": {"name": "1-128 characters: ASCII letters, digits, space and . _ : @ -"}
            },
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


def disable_scanner(scanner_id: int, *, actor_user_id: int | None, via: str) -> Scanner:
    """Revoke a scanner's token (its next call gets 401), audited, in one transaction."""
    from app.db import transaction

    with transaction() as conn:
        return set_scanner_disabled_audited(
            conn, scanner_id, True, actor_user_id=actor_user_id, via=via
        )


def create_scanner_service(
    name: Any, *, actor_user_id: int | None, via: str
) -> tuple[Scanner, str]:
    """``create_scanner_audited`` in its own transaction (for routes and pages)."""
    from app.db import transaction

    with transaction() as conn:
        return create_scanner_audited(conn, name, actor_user_id=actor_user_id, via=via)


# -- what the agent reports about itself -------------------------------------------------
@dataclass(frozen=True)
class AgentReport:
    """The ``agent`` object of a claim or renewal: version, host name, engines."""

    version: str | None
    hostname: str | None
    engines: dict[str, str | None]


def _report_error(field: str, message: str) -> ValidationError:
    return ValidationError(message, code="invalid_agent", details={"field": f"agent.{field}"})


def _short_text(value: Any, field: str, limit: int) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > limit or not value.isprintable():
        raise _report_error(
            field, f"agent.{field} must be printable text of at most {limit} characters"
        )
    return value


def parse_agent_report(value: Any) -> AgentReport | None:
    """The request body's ``agent`` object, checked (None when absent); a 400 names the field."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValidationError(
            "agent must be an object", code="invalid_agent", details={"field": "agent"}
        )
    unknown = sorted(set(value) - {"version", "hostname", "engines"})
    if unknown:
        raise _report_error(unknown[0], f"unknown field agent.{unknown[0]}")
    engines = value.get("engines", {})
    if engines is None:
        engines = {}
    if not isinstance(engines, dict) or len(engines) > MAX_ENGINES:
        raise _report_error(
            "engines", f"agent.engines must be an object of at most {MAX_ENGINES} engines"
        )
    checked: dict[str, str | None] = {}
    for name, version in engines.items():
        if not _ENGINE_NAME_RE.match(name):
            raise _report_error(
                "engines", f"engine name {name[:40]!r} is not a short lower-case name"
            )
        checked[name] = _short_text(version, f"engines.{name}", 64)
    return AgentReport(
        version=_short_text(value.get("version"), "version", 64),
        hostname=_short_text(value.get("hostname"), "hostname", 255),
        engines=dict(sorted(checked.items())),
    )


def record_agent_report(conn: Connection, scanner_id: int, report: AgentReport | None) -> None:
    """Keep what the agent said about itself, on the caller's connection (the claim's or
    renewal's transaction). The row is written only when a value differs, so repeating
    the same report (every poll of an idle agent) costs an index probe, not a write."""
    if report is None:
        return
    conn.execute(
        sa.text(
            """
            UPDATE scanners
               SET agent_version = :version, hostname = :hostname,
                   engines = CAST(:engines AS jsonb)
             WHERE id = :id
               AND (agent_version IS DISTINCT FROM :version
                    OR hostname IS DISTINCT FROM :hostname
                    OR engines IS DISTINCT FROM CAST(:engines AS jsonb))
            """
        ),
        {
            "id": scanner_id,
            "version": report.version,
            "hostname": report.hostname,
            "engines": json.dumps(report.engines),
        },
    )


# -- the fleet's view of the scanners table ----------------------------------------------
@dataclass(frozen=True)
class ScannerState:
    id: int
    name: str
    disabled: bool
    created_by: int | None
    created_at: Any
    last_seen_at: Any
    version: str | None
    hostname: str | None
    engines: dict[str, Any]
    offline: bool  # seen before, but not within the offline window


def scanner_states(
    conn: Connection,
    *,
    offline_seconds: int,
    created_by: int | None = None,
    limit: int = 1000,
    after_id: int = 0,
) -> list[ScannerState]:
    """Scanners by id with what their agents reported; ``created_by`` limits the list to
    one owner's scanners (None: all). Never the token digest."""
    rows = conn.execute(
        sa.text(
            """
            SELECT id, name, disabled, created_by, created_at, last_seen_at, agent_version,
                   hostname, engines,
                   last_seen_at IS NOT NULL
                       AND last_seen_at < now() - make_interval(secs => :offline) AS offline
              FROM scanners
             WHERE id > :after_id
               AND (CAST(:owner AS bigint) IS NULL OR created_by = CAST(:owner AS bigint))
             ORDER BY id LIMIT :limit
            """
        ),
        {"offline": offline_seconds, "owner": created_by, "limit": limit, "after_id": after_id},
    ).all()
    return [
        ScannerState(
            id=r.id,
            name=r.name,
            disabled=r.disabled,
            created_by=r.created_by,
            created_at=r.created_at,
            last_seen_at=r.last_seen_at,
            version=r.agent_version,
            hostname=r.hostname,
            engines=dict(r.engines or {}),
            offline=bool(r.offline),
        )
        for r in rows
    ]


def any_scanner_online(conn: Connection, *, offline_seconds: int) -> bool:
    """Whether some enabled scanner gave a sign of life within the offline window."""
    return bool(
        conn.execute(
            sa.text(
                "SELECT EXISTS (SELECT 1 FROM scanners WHERE NOT disabled "
                "AND last_seen_at >= now() - make_interval(secs => :offline))"
            ),
            {"offline": offline_seconds},
        ).scalar()
    )


# For another owner's statement that needs the scanners' signs of life (the scanner_offline
# alert rules): enabled scanners with their owner and last sign of life.
SCANNERS_SEEN_SQL = (
    "SELECT id AS scanner_id, name AS scanner_name, created_by AS scanner_owner, last_seen_at "
    "FROM scanners WHERE NOT disabled"
)
