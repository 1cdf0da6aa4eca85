"""A run's status follows its executions (issue 33, docs/architecture.md "Runs").

Called in the transaction of every execution change (through
``dispatch.aggregate_task_status``): the task's active runs take the status their
executions say. A cancelled run keeps ``cancelled`` whatever its executions do.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

RUN_STATUSES = ("queued", "running", "succeeded", "partial", "failed", "cancelled")
ACTIVE_RUN_STATUSES = ("queued", "running")
FINISHED_RUN_STATUSES = ("succeeded", "partial", "failed", "cancelled")
RUN_TRIGGERS = ("manual", "schedule", "import")
# Runs that ended badly, as the alerts' ``run_failed`` rules read them (app.alerts
# .conditions): finished ``failed`` or ``partial`` after ``:since`` (the partial index
# ix_task_runs_ended_badly), of tasks not deleted, with their execution counts.
ENDED_BADLY_SQL = (
    "SELECT r.id AS run_id, r.task_id, r.number, r.status, r.trigger, r.finished_at, "
    "t.owner_id, t.name AS task_name, "
    "(SELECT count(*) FROM scan_executions e WHERE e.run_id = r.id) AS executions, "
    "(SELECT count(*) FROM scan_executions e WHERE e.run_id = r.id AND e.status = 'failed') "
    "AS failed_executions "
    "FROM task_runs r JOIN scan_tasks t ON t.id = r.task_id "
    "WHERE r.status IN ('failed', 'partial') AND r.finished_at > :since "
    "AND t.deleted_at IS NULL"
)


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
                       -- When its first execution started: a run cancelled or
                       -- failed before any scanner claimed it never started.
                       started_at = CASE WHEN :status <> 'queued'
                                         THEN coalesce(started_at,
                                                       (SELECT min(e.started_at)
                                                          FROM scan_executions e
                                                         WHERE e.run_id = :id)) END,
                       finished_at = CASE WHEN :finished THEN now() END
                 WHERE id = :id
                """
            ),
            {"id": row.id, "status": status, "finished": status in FINISHED_RUN_STATUSES},
        )


@dataclass(frozen=True)
class RunState:
    id: int
    task_id: int
    number: int
    status: str

    @property
    def finished(self) -> bool:
        return self.status in FINISHED_RUN_STATUSES


def lock_run(conn: Connection, run_id: int, *, skip_locked: bool = False) -> RunState | None:
    """Lock one run's row in the caller's transaction and say where it stands.

    The alerts hold it while they decide whether the run's digest is due (app.alerts
    .run_digests), so two analyses of the same run decide one after the other. The run's
    status changes under the same lock (``refresh_active_runs``, ``runs.cancel_run``).
    None: no such run, or (``skip_locked``) another transaction holds it now.
    """
    wait = "SKIP LOCKED" if skip_locked else ""
    row = conn.execute(
        sa.text(
            "SELECT id, task_id, number, status FROM task_runs WHERE id = :run "  # noqa: S608 - constants
            f"FOR UPDATE {wait}"
        ),
        {"run": run_id},
    ).one_or_none()
    return None if row is None else RunState(row.id, row.task_id, row.number, row.status)


def task_name(conn: Connection, task_id: int) -> str | None:
    """The task's name now, on the caller's connection (alert messages name their task;
    None once the task is purged)."""
    return conn.execute(
        sa.text("SELECT name FROM scan_tasks WHERE id = :id"), {"id": task_id}
    ).scalar()
