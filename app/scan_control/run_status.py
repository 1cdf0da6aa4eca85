"""A run's status follows its executions (issue 33, docs/architecture.md "Runs").

Called in the transaction of every execution change (through
``dispatch.aggregate_task_status``): the task's active runs take the status their
executions say. A cancelled run keeps ``cancelled`` whatever its executions do.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

RUN_STATUSES = ("queued", "running", "succeeded", "partial", "failed", "cancelled")
ACTIVE_RUN_STATUSES = ("queued", "running")
FINISHED_RUN_STATUSES = ("succeeded", "partial", "failed", "cancelled")
RUN_TRIGGERS = ("manual", "schedule", "import")


def derive_run_status(statuses: list[str]) -> str:
    """The run's status from its executions' statuses."""
    if not statuses:
        return "succeeded"  # nothing to do is done
    if all(s == "queued" for s in statuses):
        return "queued"
    if any(s in ("queued", "running") for s in statuses):
        return "running"
    if any(s == "cancelled" for s in statuses):
        return "cancelled"
    if all(s == "succeeded" for s in statuses):
        return "succeeded"
    if all(s == "failed" for s in statuses):
        return "failed"
    return "partial"


def refresh_active_runs(conn: Connection, task_id: int) -> None:
    """Give the task's active runs the status of their executions (caller's transaction)."""
    rows = conn.execute(
        sa.text(
            """
            SELECT r.id, r.status,
                   ARRAY(SELECT e.status FROM scan_executions e WHERE e.run_id = r.id)
                   AS statuses
              FROM task_runs r
             WHERE r.task_id = :task AND r.status IN ('queued', 'running')
             FOR UPDATE OF r
            """
        ),
        {"task": task_id},
    ).all()
    for row in rows:
        status = derive_run_status(list(row.statuses))
        if status == row.status:
            continue
        conn.execute(
            sa.text(
                """
                UPDATE task_runs
                   SET status = :status,
                       started_at = CASE WHEN :status <> 'queued'
                                         THEN coalesce(started_at, now()) END,
                       finished_at = CASE WHEN :finished THEN now() END
                 WHERE id = :id
                """
            ),
            {"id": row.id, "status": status, "finished": status in FINISHED_RUN_STATUSES},
        )
