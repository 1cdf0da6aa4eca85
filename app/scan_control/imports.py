"""Executions of kind ``import``: the scan-control side of importing result files (AGT-7).

An import is an execution of its task that is created running, holding a
claim token and a lease like a claimed scan, but with no scanner: the
importing request (or ``netmap import``) is its holder and feeds the upload
pipeline with that token. It is never queued, so no scanner can claim it,
and it has one attempt: if the importer dies, lease recovery fails it
rather than requeueing it.
"""

from __future__ import annotations

from uuid import UUID

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.errors import Conflict
from app.scan_control.dispatch import MAX_REASON_LENGTH, aggregate_task_status
from app.scan_control.executions import EXECUTION_COLUMNS, ExecutionRow, execution_from_row
from app.scan_control.runs import run_for_import


def create_import_execution(conn: Connection, *, task_id: int, lease_seconds: int) -> ExecutionRow:
    """The import's execution, in the task's active run or a new ``import`` run."""
    run_id = run_for_import(conn, task_id)
    row = conn.execute(
        sa.text(
            f"""
            WITH e AS (
                INSERT INTO scan_executions
                       (task_id, run_id, kind, status, targets, ports, transports, claim_token,
                        lease_expires_at, attempts, max_attempts, started_at, last_error)
                SELECT t.id, :run, 'import', 'running', '[]'::jsonb, '', t.transports,
                       gen_random_uuid(), now() + make_interval(secs => :lease), 1, 1, now(), NULL
                  FROM scan_tasks t WHERE t.id = :task
                RETURNING *
            )
            SELECT {EXECUTION_COLUMNS} FROM e JOIN scan_tasks t ON t.id = e.task_id
            """  # noqa: S608 - EXECUTION_COLUMNS is a module constant; values are bound
        ),
        {"task": task_id, "run": run_id, "lease": lease_seconds},
    ).one()
    conn.execute(
        sa.text(
            "UPDATE scan_tasks SET execution_count = execution_count + 1, updated_at = now() "
            "WHERE id = :task"
        ),
        {"task": task_id},
    )
    aggregate_task_status(conn, task_id)
    return execution_from_row(row)


def renew_import_lease(
    conn: Connection, *, execution_id: int, claim_token: UUID, lease_seconds: int
) -> None:
    renewed = conn.execute(
        sa.text(
            """
            UPDATE scan_executions
               SET lease_expires_at = now() + make_interval(secs => :lease), updated_at = now()
             WHERE id = :id AND kind = 'import' AND claim_token = :token
               AND status = 'running' AND lease_expires_at > now()
            RETURNING 1
            """
        ),
        {"id": execution_id, "token": claim_token, "lease": lease_seconds},
    ).scalar()
    if not renewed:
        raise Conflict("the lease on this import was lost", code="lease_lost")


def fail_import_execution(
    conn: Connection, *, execution_id: int, claim_token: UUID, reason: str
) -> None:
    row = conn.execute(
        sa.text(
            """
            UPDATE scan_executions
               SET status = 'failed', last_error = :reason, finished_at = now(), updated_at = now()
             WHERE id = :id AND kind = 'import' AND claim_token = :token AND status = 'running'
            RETURNING task_id
            """
        ),
        {"id": execution_id, "token": claim_token, "reason": reason[:MAX_REASON_LENGTH]},
    ).one_or_none()
    if row is not None:
        aggregate_task_status(conn, row.task_id)
