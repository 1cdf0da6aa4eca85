"""Dispatch: scanners claim executions under leases; expired leases are recovered (SCN-3/4).

A claim is one statement: pick the oldest available queued execution with
``FOR UPDATE SKIP LOCKED`` and mark it running with a fresh claim token and
lease, so concurrent scanners never receive the same execution and never wait
on each other. Every write of a claimed execution names the token and an
unexpired lease in its ``WHERE`` clause; zero rows means ownership was lost.
Task status is recomputed in the same transaction as any execution change.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.errors import Conflict, NotFound, ValidationError
from app.observability import emit
from app.scan_control.executions import ExecutionRow, claim_next, raise_if_cancelled
from app.scan_control.run_status import derive_run_status, refresh_active_runs

EXECUTION_KINDS = ("ports", "dns")
MAX_REASON_LENGTH = 2000


def claim_next_execution(
    conn: Connection,
    *,
    scanner_id: int,
    lease_seconds: int,
    kinds: tuple[str, ...] = EXECUTION_KINDS,
) -> ExecutionRow | None:
    claimed = claim_next(
        conn, scanner_id=scanner_id, lease_seconds=lease_seconds, kinds=list(kinds)
    )
    if claimed is not None:
        aggregate_task_status(conn, claimed.task_id)
    return claimed


def parse_claim_token(raw: Any) -> UUID:
    try:
        return UUID(str(raw))
    except (ValueError, TypeError):
        raise ValidationError(
            "claim_token must be the token returned by the claim",
            code="invalid_claim_token",
            details={"field": "claim_token"},
        ) from None


def _ensure_visible(conn: Connection, execution_id: int, scanner_id: int) -> None:
    """A scanner sees only executions assigned to it; others are 'not found'."""
    owner = conn.execute(
        sa.text("SELECT scanner_id FROM scan_executions WHERE id = :id"), {"id": execution_id}
    ).one_or_none()
    if owner is None or owner.scanner_id != scanner_id:
        raise NotFound("execution not found", code="execution_not_found")


def renew_execution_lease(
    conn: Connection, *, execution_id: int, scanner_id: int, claim_token: UUID, lease_seconds: int
) -> datetime:
    expires = conn.execute(
        sa.text(
            """
            UPDATE scan_executions
               SET lease_expires_at = now() + make_interval(secs => :lease), updated_at = now()
             WHERE id = :id AND scanner_id = :scanner_id AND claim_token = :token
               AND status = 'running' AND lease_expires_at > now()
            RETURNING lease_expires_at
            """
        ),
        {
            "id": execution_id,
            "scanner_id": scanner_id,
            "token": claim_token,
            "lease": lease_seconds,
        },
    ).scalar()
    if expires is None:
        _ensure_visible(conn, execution_id, scanner_id)
        raise_if_cancelled(conn, execution_id)
        raise Conflict("the lease on this execution was lost", code="lease_lost")
    return expires


def fail_execution(
    conn: Connection, *, execution_id: int, scanner_id: int, claim_token: UUID, reason: str
) -> bool:
    """The scanner gives up on an execution: it fails at once (no retry; a scanner that
    wants one lets its lease run out). Repeating the same call is harmless: False when
    the execution had already been failed by this claim."""
    reason = (reason or "failed by scanner")[:MAX_REASON_LENGTH]
    row = conn.execute(
        sa.text(
            """
            UPDATE scan_executions
               SET status = 'failed', last_error = :reason, finished_at = now(), updated_at = now()
             WHERE id = :id AND scanner_id = :scanner_id AND claim_token = :token
               AND status = 'running' AND lease_expires_at > now()
            RETURNING task_id
            """
        ),
        {"id": execution_id, "scanner_id": scanner_id, "token": claim_token, "reason": reason},
    ).one_or_none()
    if row is not None:
        aggregate_task_status(conn, row.task_id)
        return True
    _ensure_visible(conn, execution_id, scanner_id)
    already = conn.execute(
        sa.text(
            "SELECT 1 FROM scan_executions WHERE id = :id AND claim_token = :token "
            "AND status = 'failed'"
        ),
        {"id": execution_id, "token": claim_token},
    ).scalar()
    if not already:
        raise Conflict("the lease on this execution was lost", code="lease_lost")
    return False


@dataclass(frozen=True)
class RecoveryResult:
    requeued: int
    failed: int


def recover_expired_leases(
    conn: Connection, *, retry_backoff_seconds: int, batch: int = 500
) -> RecoveryResult:
    """Requeue executions whose scanner lease expired; past max_attempts they fail."""
    rows = conn.execute(
        sa.text(
            """
            WITH expired AS (
                SELECT id FROM scan_executions
                WHERE status = 'running' AND lease_expires_at < now()
                ORDER BY lease_expires_at
                LIMIT :batch
                FOR UPDATE SKIP LOCKED
            )
            UPDATE scan_executions e
               SET status = CASE WHEN e.attempts >= e.max_attempts THEN 'failed' ELSE 'queued' END,
                   last_error = 'scanner lease expired (attempt ' || e.attempts || ' of '
                                || e.max_attempts || ')',
                   claim_token = CASE WHEN e.attempts >= e.max_attempts THEN e.claim_token END,
                   lease_expires_at = CASE WHEN e.attempts >= e.max_attempts
                                           THEN e.lease_expires_at END,
                   scanner_id = CASE WHEN e.attempts >= e.max_attempts THEN e.scanner_id END,
                   available_at = CASE WHEN e.attempts >= e.max_attempts THEN e.available_at
                                       ELSE now() + make_interval(secs => :backoff * e.attempts)
                                  END,
                   finished_at = CASE WHEN e.attempts >= e.max_attempts THEN now() END,
                   updated_at = now()
              FROM expired
             WHERE e.id = expired.id
            RETURNING e.id, e.task_id, e.status
            """
        ),
        {"batch": batch, "backoff": retry_backoff_seconds},
    ).all()
    for task_id in sorted({r.task_id for r in rows}):
        aggregate_task_status(conn, task_id)
    requeued = sum(1 for r in rows if r.status == "queued")
    failed = len(rows) - requeued
    if rows:
        emit(
            "ExecutionLeasesRecovered",
            level=logging.WARNING if failed else logging.INFO,
            requeued=requeued,
            failed=failed,
            execution_ids=[r.id for r in rows][:50],
        )
    return RecoveryResult(requeued=requeued, failed=failed)


def derive_task_status(statuses: list[str]) -> str:
    """Task status from its executions' and child tasks' statuses (SCN-4): a run's rule,
    except that a task with nothing yet is queued and a mixed ending is spelled
    ``partially_failed`` (the task API's name)."""
    if not statuses:
        return "queued"
    status = derive_run_status(statuses)
    return "partially_failed" if status == "partial" else status


def aggregate_task_status(conn: Connection, task_id: int) -> str:
    """Recompute a task's status (and its parent's) inside the caller's transaction.

    The task's active runs follow their executions first; the task's status is then its
    newest run's: that run's executions and the child tasks its DNS executions made.
    """
    # Lock order everywhere: executions, then the task, then its runs.
    conn.execute(sa.text("SELECT 1 FROM scan_tasks WHERE id = :id FOR UPDATE"), {"id": task_id})
    refresh_active_runs(conn, task_id)
    row = conn.execute(
        sa.text(
            """
            SELECT t.status, t.parent_task_id, t.scan, r.id AS run_id,
                   ARRAY(SELECT e.status FROM scan_executions e WHERE e.run_id = r.id)
                   || ARRAY(SELECT c.status FROM scan_tasks c
                             WHERE c.parent_task_id = t.id AND c.parent_execution_id IN
                                   (SELECT e.id FROM scan_executions e WHERE e.run_id = r.id))
                   AS statuses
            FROM scan_tasks t
            LEFT JOIN LATERAL (
                SELECT id FROM task_runs WHERE task_id = t.id ORDER BY number DESC LIMIT 1
            ) r ON true
            WHERE t.id = :id
            FOR UPDATE OF t
            """
        ),
        {"id": task_id},
    ).one_or_none()
    if row is None:
        return "queued"
    status = derive_task_status(list(row.statuses))
    if row.run_id is None and not row.scan:
        status = "idle"  # import-only, no import yet: nothing is queued
    if status != row.status:
        terminal = status in ("succeeded", "failed", "partially_failed", "cancelled")
        conn.execute(
            sa.text(
                """
                UPDATE scan_tasks SET status = :status, updated_at = now(),
                       finished_at = CASE WHEN :terminal THEN now() END
                WHERE id = :id
                """
            ),
            {"id": task_id, "status": status, "terminal": terminal},
        )
        if row.parent_task_id is not None:
            aggregate_task_status(conn, row.parent_task_id)
    return status
