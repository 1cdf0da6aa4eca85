"""The ``exports`` table: requests, build claims under a lease, outcomes (EXP-7, EXP-8).

Every statement is short and runs in its own transaction. A build claim sets
``claim_token`` and ``lease_expires_at``; every later write of that build
names both in its ``WHERE`` clause, and 0 rows means ownership was lost
(the lease expired and another runner took over, or the export was deleted).
A build whose runner died is claimed again once its lease has passed, up to
``[exports] max_attempts`` attempts.

The host cap (EXP-9): claims on one host are serialised by a transaction-level
advisory lock named after the host, and a host already running
``[exports] concurrency`` live builds claims nothing, whatever number of
runner processes it has.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.db import transaction
from app.leases import LeasedRows

FORMATS = ("csv", "jsonl", "zip")
# A build holds its export row under a lease while the status is ``building``.
BUILDS = LeasedRows("exports", "id", condition="status = 'building'")
CONTENT_TYPES = {
    "csv": "text/csv; charset=utf-8",
    "jsonl": "application/x-ndjson",
    "zip": "application/zip",
}
_COLUMNS = """
    id, owner_id, task_id, task_name, format, status, execution_ids, object_key, content_type,
    size_bytes, row_count, attempts, error, created_at, started_at, finished_at, expires_at,
    deleted_at, query, query_at, asset_filters
"""


@dataclass(frozen=True)
class ExportClaim:
    id: int
    task_id: int
    task_name: str
    format: str
    execution_ids: tuple[int, ...]
    object_key: str
    claim_token: uuid.UUID
    attempts: int
    lease_seconds: float
    # An asset export (task_id None): the search-language query and the moment its
    # durations are relative to (docs/search-language.md).
    query: str | None = None
    query_at: datetime | None = None
    owner_id: int | None = None
    # ``GET /api/assets`` parameters ANDed with the query (an export of an Assets page).
    asset_filters: dict[str, str] | None = None


def file_name(export_id: int, task_id: int | None, fmt: str) -> str:
    if task_id is None:
        return f"netmap-assets-export-{export_id}.{fmt}"
    return f"netmap-task-{task_id}-export-{export_id}.{fmt}"


def object_key(export_id: int, task_id: int | None, fmt: str) -> str:
    # Deterministic per export: a rebuild after a crash overwrites, never orphans.
    return f"exports/{export_id}/{file_name(export_id, task_id, fmt)}"


def export_dict(row: Any) -> dict[str, Any]:
    def iso(value: datetime | None) -> str | None:
        return value.isoformat() if value else None

    return {
        "id": row.id,
        "task_id": row.task_id,
        "owner_id": row.owner_id,
        "format": row.format,
        "status": row.status,
        "executions": list(row.execution_ids),
        "size": row.size_bytes,
        "rows": row.row_count,
        "attempts": row.attempts,
        "error": row.error,
        "created_at": iso(row.created_at),
        "started_at": iso(row.started_at),
        "finished_at": iso(row.finished_at),
        "expires_at": iso(row.expires_at),
        "deleted_at": iso(row.deleted_at),
        "query": row.query,
        "filters": row.asset_filters,
    }


def insert_export(
    conn: Connection,
    *,
    owner_id: int,
    task_id: int | None,
    task_name: str,
    fmt: str,
    execution_ids: list[int],
    query: str | None = None,
    query_at: datetime | None = None,
    asset_filters: dict[str, str] | None = None,
) -> Any:
    export_id = conn.execute(sa.text("SELECT nextval('exports_id_seq')")).scalar_one()
    return conn.execute(
        sa.text(
            f"""
            INSERT INTO exports (id, owner_id, task_id, task_name, format, execution_ids,
                                 object_key, content_type, query, query_at, asset_filters)
            VALUES (:id, :owner_id, :task_id, :task_name, :format, :execution_ids, :key, :ctype,
                    :query, :query_at, CAST(:filters AS jsonb))
            RETURNING {_COLUMNS}
            """  # noqa: S608 - fixed column list and visibility clause; values are bound
        ),
        {
            "id": export_id,
            "owner_id": owner_id,
            "task_id": task_id,
            "task_name": task_name,
            "format": fmt,
            "execution_ids": execution_ids,
            "key": object_key(export_id, task_id, fmt),
            "ctype": CONTENT_TYPES[fmt],
            "query": query,
            "query_at": query_at,
            "filters": json.dumps(asset_filters) if asset_filters is not None else None,
        },
    ).one()


def _visible(owner_id: int, is_admin: bool) -> tuple[str, dict[str, Any]]:
    return ("TRUE", {}) if is_admin else ("owner_id = :owner_id", {"owner_id": owner_id})


def get_export(conn: Connection, export_id: int, *, user_id: int, is_admin: bool) -> Any | None:
    clause, params = _visible(user_id, is_admin)
    return conn.execute(
        sa.text(f"SELECT {_COLUMNS} FROM exports WHERE id = :id AND {clause}"),  # noqa: S608 - fixed column list and visibility clause; values are bound
        {"id": export_id, **params},
    ).one_or_none()


def list_exports(
    conn: Connection, *, owner_id: int, limit: int, after_id: int | None
) -> tuple[list[Any], int | None]:
    rows = conn.execute(
        sa.text(
            f"""
            SELECT {_COLUMNS} FROM exports
            WHERE owner_id = :owner_id AND (CAST(:after AS bigint) IS NULL OR id < :after)
            ORDER BY id DESC LIMIT :limit
            """  # noqa: S608 - fixed column list and visibility clause; values are bound
        ),
        {"owner_id": owner_id, "after": after_id, "limit": limit + 1},
    ).all()
    next_id = rows[limit - 1].id if len(rows) > limit else None
    return rows[:limit], next_id


def mark_deleted(conn: Connection, export_id: int, *, user_id: int, is_admin: bool) -> Any | None:
    """Withdraw an export (a running build loses its claim); None when it was already deleted."""
    clause, params = _visible(user_id, is_admin)
    return conn.execute(
        sa.text(
            f"""
            UPDATE exports SET status = 'deleted', deleted_at = now(),
                   claim_token = NULL, lease_expires_at = NULL
            WHERE id = :id AND {clause} AND status <> 'deleted'
            RETURNING {_COLUMNS}
            """  # noqa: S608 - fixed column list and visibility clause; values are bound
        ),
        {"id": export_id, **params},
    ).one_or_none()


def claim_next_build(
    *, host: str, concurrency: int, lease_seconds: float, max_attempts: int
) -> tuple[ExportClaim | None, list[str]]:
    """Claim the next due export on this host, if the host has a free build slot.

    Returns the claim (or None) and the object keys of builds that ran out of
    attempts here and were marked failed (the caller deletes them as compensation).
    """
    with transaction() as conn:
        exhausted = list(
            conn.execute(
                sa.text(
                    """
                    UPDATE exports SET status = 'failed', claim_token = NULL,
                           lease_expires_at = NULL, finished_at = now(),
                           error = 'build lease expired ' || attempts || ' times'
                    WHERE status = 'building' AND lease_expires_at < now()
                      AND attempts >= :max_attempts
                    RETURNING object_key
                    """
                ),
                {"max_attempts": max_attempts},
            ).scalars()
        )
        conn.execute(
            sa.text("SELECT pg_advisory_xact_lock(hashtext('netmap-export-builds:' || :host))"),
            {"host": host},
        )
        running = conn.execute(
            sa.text(
                "SELECT count(*) FROM exports WHERE status = 'building' "
                "AND build_host = :host AND lease_expires_at > now()"
            ),
            {"host": host},
        ).scalar_one()
        if running >= concurrency:
            return None, exhausted
        row = conn.execute(
            sa.text(
                """
                WITH next AS (
                    SELECT id FROM exports
                    WHERE (status = 'queued' AND available_at <= now())
                       OR (status = 'building' AND lease_expires_at < now())
                    ORDER BY available_at, id
                    LIMIT 1
                    FOR UPDATE SKIP LOCKED
                )
                UPDATE exports e
                   SET status = 'building', claim_token = gen_random_uuid(),
                       lease_expires_at = now() + make_interval(secs => :lease),
                       build_host = :host, attempts = e.attempts + 1,
                       started_at = now(), error = NULL
                  FROM next WHERE e.id = next.id
                RETURNING e.id, e.task_id, e.task_name, e.format, e.execution_ids,
                          e.object_key, e.claim_token, e.attempts, e.owner_id, e.query,
                          e.query_at, e.asset_filters
                """
            ),
            {"lease": lease_seconds, "host": host},
        ).one_or_none()
    if row is None:
        return None, exhausted
    return (
        ExportClaim(
            id=row.id,
            task_id=row.task_id,
            task_name=row.task_name,
            format=row.format,
            execution_ids=tuple(row.execution_ids),
            object_key=row.object_key,
            claim_token=row.claim_token,
            attempts=row.attempts,
            lease_seconds=lease_seconds,
            query=row.query,
            query_at=row.query_at,
            owner_id=row.owner_id,
            asset_filters=row.asset_filters,
        ),
        exhausted,
    )


def renew(claim: ExportClaim) -> bool:
    """Extend the build lease; False means ownership was lost."""
    return BUILDS.renew(claim.id, claim.claim_token, claim.lease_seconds)


def finish_ready(
    claim: ExportClaim, *, size: int, rows: int, sha256: str, retention_hours: float
) -> bool:
    with transaction() as conn:
        return bool(
            conn.execute(
                sa.text(
                    """
                    UPDATE exports
                       SET status = 'ready', size_bytes = :size, row_count = :rows,
                           sha256 = :sha256, claim_token = NULL, lease_expires_at = NULL,
                           finished_at = now(),
                           expires_at = now() + make_interval(secs => :retention)
                    WHERE id = :id AND claim_token = :token AND status = 'building'
                      AND lease_expires_at > now()
                    RETURNING 1
                    """
                ),
                {
                    "id": claim.id,
                    "token": claim.claim_token,
                    "size": size,
                    "rows": rows,
                    "sha256": sha256,
                    "retention": retention_hours * 3600.0,
                },
            ).scalar()
        )


def finish_failed(
    claim: ExportClaim, *, error: str, max_attempts: int, backoff_seconds: float
) -> str | None:
    """Requeue (attempts left) or fail the build; the new status, or None if not ours."""
    with transaction() as conn:
        return conn.execute(
            sa.text(
                """
                UPDATE exports
                   SET status = CASE WHEN attempts < :max_attempts THEN 'queued' ELSE 'failed' END,
                       available_at = now() + make_interval(secs => :backoff),
                       finished_at = CASE WHEN attempts < :max_attempts THEN NULL ELSE now() END,
                       error = :error, claim_token = NULL, lease_expires_at = NULL
                WHERE id = :id AND claim_token = :token AND status = 'building'
                RETURNING status
                """
            ),
            {
                "id": claim.id,
                "token": claim.claim_token,
                "error": error[:1000],
                "max_attempts": max_attempts,
                "backoff": backoff_seconds,
            },
        ).scalar()


def current_status(export_id: int) -> tuple[str | None, uuid.UUID | None]:
    with transaction() as conn:
        row = conn.execute(
            sa.text("SELECT status, claim_token FROM exports WHERE id = :id"), {"id": export_id}
        ).one_or_none()
    return (row.status, row.claim_token) if row else (None, None)


def due_for_expiry(limit: int) -> list[tuple[int, str]]:
    with transaction() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT id, object_key FROM exports WHERE status = 'ready' "
                "AND expires_at <= now() ORDER BY expires_at, id LIMIT :limit"
            ),
            {"limit": limit},
        ).all()
    return [(row.id, row.object_key) for row in rows]


def mark_expired(export_ids: list[int]) -> int:
    if not export_ids:
        return 0
    with transaction() as conn:
        return conn.execute(
            sa.text(
                "UPDATE exports SET status = 'expired' "
                "WHERE id = ANY(:ids) AND status = 'ready' AND expires_at <= now()"
            ),
            {"ids": export_ids},
        ).rowcount
