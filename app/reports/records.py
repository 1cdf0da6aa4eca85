"""The ``reports``, ``report_jobs`` and ``report_deliveries`` tables (REP-1, REP-3, REP-6).

Every function is one short transaction (or runs inside the caller's). A
report job is claimed with ``claim_token`` + ``lease_expires_at``; every later
write of that job names both, and 0 rows means ownership was lost. Scheduled
reports are created with ``INSERT … ON CONFLICT (schedule_key) DO NOTHING``,
so a period closed by several runners at once still yields one report.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.db import transaction
from app.leases import LeasedRows
from app.scan_control.visibility import task_not_deleted_sql

MAX_ATTEMPTS = 5
# A running report job is held under a lease (claim_token + lease_expires_at).
JOBS = LeasedRows("report_jobs", "report_id", condition="status = 'running'")


@dataclass(frozen=True)
class ReportClaim:
    report_id: int
    claim_token: uuid.UUID
    attempts: int
    lease_seconds: float


def period_bounds(kind: str, zone: str, now: datetime) -> tuple[datetime, datetime]:
    """The last period of ``kind`` that closed at or before ``now``, in the definition's zone."""
    local = now.astimezone(ZoneInfo(zone))
    midnight = local.replace(hour=0, minute=0, second=0, microsecond=0)
    if kind == "weekly":
        end = midnight - timedelta(days=midnight.weekday())  # Monday 00:00 local
        start = end - timedelta(days=7)
    else:
        end = midnight
        start = end - timedelta(days=1)
    return start, end


def _insert_report(
    conn: Connection,
    definition: Any,
    *,
    period_kind: str,
    start: datetime,
    end: datetime,
    schedule_key: str | None,
    run_id: int | None = None,
) -> int | None:
    report_id = conn.execute(
        sa.text(
            """
            INSERT INTO reports (definition_id, owner_id, task_id, period_kind, period_start,
                                 period_end, schedule_key, run_id)
            VALUES (:d, :o, :t, :k, :s, :e, :key, :run)
            ON CONFLICT (schedule_key) DO NOTHING
            RETURNING id
            """
        ),
        {
            "d": definition.id,
            "o": definition.owner_id,
            "t": definition.task_id,
            "k": period_kind,
            "s": start,
            "e": end,
            "key": schedule_key,
            "run": run_id,
        },
    ).scalar()
    if report_id is not None:
        conn.execute(sa.text("INSERT INTO report_jobs (report_id) VALUES (:r)"), {"r": report_id})
    return report_id


def create_on_demand_report(
    conn: Connection, definition: Any, *, now: datetime | None = None, run_id: int | None = None
) -> dict[str, Any]:
    end = now or conn.execute(sa.text("SELECT now()")).scalar_one()
    report_id = _insert_report(
        conn,
        definition,
        period_kind="on_demand",
        start=end - timedelta(days=1),
        end=end,
        schedule_key=None,
        run_id=run_id,
    )
    return report_dict(get_report_row(conn, report_id), [])


def create_due_scheduled_reports(now: datetime) -> list[int]:
    """Create the report of every enabled scheduled definition whose last period closed.

    The unique ``schedule_key`` (definition, period start) makes this safe to run
    from every runner at once and again after a restart: one report per period.
    """
    created: list[int] = []
    with transaction() as conn:
        definitions = conn.execute(
            sa.text(
                "SELECT id, owner_id, task_id, period, timezone, created_at "  # noqa: S608 - a fixed clause
                "FROM report_definitions "
                "WHERE enabled AND period <> 'on_demand' AND created_at < now() "
                f"AND {task_not_deleted_sql('report_definitions.task_id')}"
            )
        ).all()
        for definition in definitions:
            start, end = period_bounds(definition.period, definition.timezone, now)
            if definition.created_at >= end:
                # Made after that period closed: its report would carry today's figures
                # under yesterday's dates. The first report is of the period it was made in.
                continue
            key = f"{definition.id}:{definition.period}:{start.isoformat()}"
            report_id = _insert_report(
                conn,
                definition,
                period_kind=definition.period,
                start=start,
                end=end,
                schedule_key=key,
            )
            if report_id is not None:
                created.append(report_id)
    return created


def claim_next_job(*, lease_seconds: float, max_attempts: int = MAX_ATTEMPTS) -> ReportClaim | None:
    with transaction() as conn:
        # A runner that died mid-report spent an attempt too: after the last one the
        # report fails instead of being taken over forever.
        exhausted = list(
            conn.execute(
                sa.text(
                    """
                    UPDATE report_jobs
                       SET status = 'failed', claim_token = NULL, lease_expires_at = NULL,
                           error_kind = 'lease_expired', updated_at = now(),
                           last_error = 'generation lease expired ' || attempts || ' times'
                     WHERE status = 'running' AND lease_expires_at < now()
                       AND attempts >= :max
                    RETURNING report_id
                    """
                ),
                {"max": max_attempts},
            ).scalars()
        )
        if exhausted:
            conn.execute(
                sa.text(
                    "UPDATE reports SET status = 'failed', finished_at = now(), "
                    "error = 'generation lease expired too often', revision = revision + 1 "
                    "WHERE id = ANY(:ids)"
                ),
                {"ids": exhausted},
            )
        row = conn.execute(
            sa.text(
                """
                WITH next AS (
                    SELECT report_id FROM report_jobs
                    WHERE (status IN ('queued', 'retry_wait') AND available_at <= now())
                       OR (status = 'running' AND lease_expires_at < now())
                    ORDER BY available_at, report_id
                    LIMIT 1
                    FOR UPDATE SKIP LOCKED
                )
                UPDATE report_jobs j
                   SET status = 'running', claim_token = gen_random_uuid(),
                       lease_expires_at = now() + make_interval(secs => :lease),
                       attempts = j.attempts + 1, updated_at = now()
                  FROM next WHERE j.report_id = next.report_id
                RETURNING j.report_id, j.claim_token, j.attempts
                """
            ),
            {"lease": lease_seconds},
        ).one_or_none()
        if row is None:
            return None
        conn.execute(
            sa.text(
                "UPDATE reports SET status = 'generating' WHERE id = :id AND status = 'queued'"
            ),
            {"id": row.report_id},
        )
    return ReportClaim(row.report_id, row.claim_token, row.attempts, lease_seconds)


def renew(claim: ReportClaim) -> bool:
    """Extend the job's lease; False means ownership was lost."""
    return JOBS.renew(claim.report_id, claim.claim_token, claim.lease_seconds)


def requeue_after_temporary_error(
    claim: ReportClaim, *, kind: str, error: str, max_attempts: int = MAX_ATTEMPTS
) -> str | None:
    """Report back to ``queued`` and the job to ``retry_wait`` (backoff: ``attempt`` minutes),
    or both ``failed`` after the last attempt. None when the claim was not ours any more."""
    with transaction() as conn:
        status = conn.execute(
            sa.text(
                """
                UPDATE report_jobs
                   SET status = CASE WHEN attempts < :max THEN 'retry_wait' ELSE 'failed' END,
                       available_at = now() + make_interval(mins => attempts),
                       claim_token = NULL, lease_expires_at = NULL,
                       error_kind = :kind, last_error = :error, updated_at = now()
                 WHERE report_id = :id AND claim_token = :token AND status = 'running'
                   AND lease_expires_at > now()
                RETURNING status
                """
            ),
            {
                "id": claim.report_id,
                "token": claim.claim_token,
                "kind": kind,
                "error": error[:1000],
                "max": max_attempts,
            },
        ).scalar()
        if status is not None:
            conn.execute(
                sa.text(
                    """
                    UPDATE reports SET status = CASE WHEN :failed THEN 'failed' ELSE 'queued' END,
                           error = :error, revision = revision + 1,
                           finished_at = CASE WHEN :failed THEN now() END
                     WHERE id = :id
                    """
                ),
                {"id": claim.report_id, "failed": status == "failed", "error": error[:1000]},
            )
    return status


def mark_job_done(conn: Connection, report_id: int) -> None:
    """The report's generation job is finished (its lease released), on ``conn``."""
    conn.execute(
        sa.text(
            "UPDATE report_jobs SET status = 'done', claim_token = NULL, "
            "lease_expires_at = NULL, error_kind = NULL, last_error = NULL, "
            "updated_at = now() WHERE report_id = :id"
        ),
        {"id": report_id},
    )


def retry_failed(report_id: int) -> bool:
    """Admin: re-queue a failed report with a fresh attempt budget."""
    with transaction() as conn:
        row = conn.execute(
            sa.text(
                """
                UPDATE report_jobs j
                   SET status = 'queued', attempts = 0, available_at = now(),
                       error_kind = NULL, last_error = NULL, updated_at = now()
                  FROM reports r
                 WHERE j.report_id = :id AND r.id = j.report_id AND r.status = 'failed'
                RETURNING 1
                """
            ),
            {"id": report_id},
        ).scalar()
        if row:
            conn.execute(
                sa.text(
                    "UPDATE reports SET status = 'queued', error = NULL, finished_at = NULL, "
                    "revision = revision + 1 WHERE id = :id"
                ),
                {"id": report_id},
            )
    return bool(row)


def resend_failed_deliveries(report_id: int) -> int:
    """Admin: send a ready report's failed deliveries again (same Message-ID: none of them
    was accepted); returns how many were queued."""
    with transaction() as conn:
        return len(
            conn.execute(
                sa.text(
                    """
                    UPDATE report_deliveries d
                       SET status = 'queued', attempts = 0, available_at = now(),
                           claim_token = NULL, lease_expires_at = NULL, last_error = NULL
                      FROM reports r
                     WHERE d.report_id = :id AND r.id = d.report_id AND r.status = 'ready'
                       AND d.status = 'failed'
                    RETURNING d.id
                    """
                ),
                {"id": report_id},
            ).all()
        )


def get_report_row(conn: Connection, report_id: int) -> Any:
    return conn.execute(
        sa.text(
            """
            SELECT r.*, d.name AS definition_name, j.status AS job_status, j.attempts,
                   j.available_at, j.error_kind
              FROM reports r
              JOIN report_definitions d ON d.id = r.definition_id
              LEFT JOIN report_jobs j ON j.report_id = r.id
             WHERE r.id = :id
            """
        ),
        {"id": report_id},
    ).one_or_none()


def deliveries_of(conn: Connection, report_ids: list[int]) -> dict[int, list[dict[str, Any]]]:
    rows = conn.execute(
        sa.text(
            "SELECT report_id, recipient, status, attempts, last_error, sent_at, message_id "
            "FROM report_deliveries WHERE report_id = ANY(:ids) ORDER BY id"
        ),
        {"ids": report_ids},
    ).all()
    out: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        out.setdefault(row.report_id, []).append(
            {
                "recipient": row.recipient,
                "status": row.status,
                "attempts": row.attempts,
                "error": row.last_error,
                "sent_at": row.sent_at.isoformat() if row.sent_at else None,
                "message_id": row.message_id,
            }
        )
    return out


def report_dict(row: Any, deliveries: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": row.id,
        "definition_id": row.definition_id,
        "definition_name": row.definition_name,
        "owner_id": row.owner_id,
        "task_id": row.task_id,
        "run_id": row.run_id,
        "status": row.status,
        "period": {
            "kind": row.period_kind,
            "start": row.period_start.isoformat(),
            "end": row.period_end.isoformat(),
        },
        "statistics": row.statistics,
        "quality": row.quality,
        "subject": row.subject,
        "images": [image["token"] for image in row.images],
        "job": {
            "status": row.job_status,
            "attempts": row.attempts,
            "available_at": row.available_at.isoformat() if row.available_at else None,
            "error_kind": row.error_kind,
        },
        "error": row.error,
        "deliveries": deliveries,
        "created_at": row.created_at.isoformat(),
        "finished_at": row.finished_at.isoformat() if row.finished_at else None,
    }


def list_reports(
    conn: Connection, *, owner_id: int | None, limit: int, after_id: int | None
) -> tuple[list[dict[str, Any]], int | None]:
    ids = list(
        conn.execute(
            sa.text(
                """
                SELECT id FROM reports
                 WHERE (CAST(:owner AS bigint) IS NULL OR owner_id = :owner)
                   AND (CAST(:after AS bigint) IS NULL OR id < :after)
                 ORDER BY id DESC LIMIT :limit
                """
            ),
            {"owner": owner_id, "after": after_id, "limit": limit + 1},
        ).scalars()
    )
    next_id = ids[limit - 1] if len(ids) > limit else None
    ids = ids[:limit]
    deliveries = deliveries_of(conn, ids)
    return [report_dict(get_report_row(conn, i), deliveries.get(i, [])) for i in ids], next_id


def postpone(claim: ReportClaim, *, seconds: float, reason: str) -> bool:
    """Wait for data without spending an attempt (the completeness rule of capture)."""
    with transaction() as conn:
        done = conn.execute(
            sa.text(
                """
                UPDATE report_jobs
                   SET status = 'retry_wait', attempts = greatest(attempts - 1, 0),
                       available_at = now() + make_interval(secs => :secs),
                       claim_token = NULL, lease_expires_at = NULL, error_kind = 'waiting',
                       last_error = :reason, updated_at = now()
                 WHERE report_id = :id AND claim_token = :token AND status = 'running'
                   AND lease_expires_at > now()
                RETURNING 1
                """
            ),
            {"id": claim.report_id, "token": claim.claim_token, "secs": seconds, "reason": reason},
        ).scalar()
        if done:
            conn.execute(
                sa.text("UPDATE reports SET status = 'queued' WHERE id = :id"),
                {"id": claim.report_id},
            )
    return bool(done)
