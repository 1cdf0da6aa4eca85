"""Runs: each pass over a task's targets and ports is a run (issue 33, docs/architecture.md "Runs").

A run (``task_runs``) is numbered 1, 2, … per task and owns the executions queued for
it (``scan_executions.run_id``); its status follows them (``run_status``). Task
creation starts run 1 through ``queue_run``; ``POST /api/tasks/<id>/runs``, the
scheduler and imports start the later ones through the same function.

At most one run of a task is active (queued or running): ``queue_run`` holds the
task's row lock while it checks, and the partial unique index
``uq_task_runs_one_active`` backs the rule for any writer, so a second start answers
409 ``run_active``.

Lock order (with ``dispatch.aggregate_task_status``): executions, then the task, then
its runs, so a cancel racing a claim or a final waits instead of deadlocking.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.config import ScanSettings
from app.db import transaction
from app.errors import Conflict, NotFound, ValidationError
from app.identity.users import User
from app.observability import emit
from app.scan_control.dispatch import aggregate_task_status
from app.scan_control.planning import PlannedExecution, plan_executions
from app.scan_control.run_status import ACTIVE_RUN_STATUSES, RUN_TRIGGERS
from app.scan_control.visibility import task_visible
from app.target_rules import ParsedTargets


@dataclass(frozen=True)
class Run:
    id: int
    task_id: int
    number: int
    status: str
    trigger: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    counts: dict[str, Any]

    def public(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "task_id": self.task_id,
            "number": self.number,
            "status": self.status,
            "trigger": self.trigger,
            "created_at": self.created_at.isoformat(),
            "started_at": self.started_at.isoformat() if self.started_at else None,
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            "counts": self.counts,
        }


# One run with its counts, summed over its executions; ``r`` is task_runs.
RUN_SELECT = """
    SELECT r.id, r.task_id, r.number, r.status, r.trigger, r.created_at, r.started_at,
           r.finished_at,
           coalesce(c.executions, 0) AS executions,
           coalesce(c.queued, 0) AS queued, coalesce(c.running, 0) AS running,
           coalesce(c.succeeded, 0) AS succeeded, coalesce(c.failed, 0) AS failed,
           coalesce(c.cancelled, 0) AS cancelled,
           coalesce(c.endpoints, 0) AS endpoints, coalesce(c.observations, 0) AS observations,
           coalesce(c.ips, 0) AS ips
      FROM task_runs r
      LEFT JOIN LATERAL (
          SELECT count(*) AS executions,
                 count(*) FILTER (WHERE e.status = 'queued') AS queued,
                 count(*) FILTER (WHERE e.status = 'running') AS running,
                 count(*) FILTER (WHERE e.status = 'succeeded') AS succeeded,
                 count(*) FILTER (WHERE e.status = 'failed') AS failed,
                 count(*) FILTER (WHERE e.status = 'cancelled') AS cancelled,
                 sum(e.endpoint_count) AS endpoints, sum(e.observation_count) AS observations,
                 sum(e.ip_count) AS ips
            FROM scan_executions e WHERE e.run_id = r.id
      ) c ON true
"""


def latest_runs(conn: Connection, task_ids: list[int]) -> dict[int, Run]:
    """Each of ``task_ids``' newest run (when it has one), in one statement."""
    rows = conn.execute(
        sa.text(
            f"""
            SELECT l.* FROM unnest(CAST(:ids AS bigint[])) AS t(id)
            CROSS JOIN LATERAL ({RUN_SELECT} WHERE r.task_id = t.id
                                ORDER BY r.number DESC LIMIT 1) AS l
            """  # noqa: S608 - constant columns; values are bound
        ),
        {"ids": task_ids},
    ).all()
    return {r.task_id: run_from_row(r) for r in rows}


def run_from_row(row: Any) -> Run:
    return Run(
        id=row.id,
        task_id=row.task_id,
        number=row.number,
        status=row.status,
        trigger=row.trigger,
        created_at=row.created_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        counts={
            "executions": {
                "total": int(row.executions),
                "queued": int(row.queued),
                "running": int(row.running),
                "succeeded": int(row.succeeded),
                "failed": int(row.failed),
                "cancelled": int(row.cancelled),
            },
            "endpoints": int(row.endpoints),
            "observations": int(row.observations),
            "ips": int(row.ips),
        },
    )


def stored_targets(normalised: list[str]) -> ParsedTargets:
    """A task's stored (already validated and normalised) targets, parsed again."""
    parsed = ParsedTargets()
    for text in normalised:
        try:
            parsed.networks.append(ipaddress.ip_network(text, strict=False))
        except ValueError:
            parsed.domains.append(text)
    return parsed


def insert_executions(
    conn: Connection,
    *,
    task_id: int,
    run_id: int,
    planned: list[PlannedExecution],
    ports: str,
    transports: list[str],
    profile: str,
    max_attempts: int,
) -> None:
    if not planned:
        return
    conn.execute(
        sa.text(
            """
            INSERT INTO scan_executions
                   (task_id, run_id, kind, targets, ports, transports, max_attempts, profile)
            SELECT :task_id, :run_id, p.kind, p.targets, :ports, :transports, :max_attempts,
                   :profile
            FROM jsonb_to_recordset(CAST(:planned AS jsonb)) AS p(kind text, targets jsonb)
            """
        ),
        {
            "task_id": task_id,
            "run_id": run_id,
            "ports": ports,
            "transports": transports,
            "max_attempts": max_attempts,
            "profile": profile,
            "planned": json.dumps([{"kind": e.kind, "targets": list(e.targets)} for e in planned]),
        },
    )


def active_run_id(conn: Connection, task_id: int) -> int | None:
    return conn.execute(
        sa.text(
            "SELECT id FROM task_runs WHERE task_id = :task AND status IN ('queued', 'running')"
        ),
        {"task": task_id},
    ).scalar()


def queue_run(
    conn: Connection,
    task_id: int,
    *,
    trigger: str,
    limits: ScanSettings | None,
    planned: list[PlannedExecution] | None = None,
) -> Run:
    """Create the task's next run and queue its executions, in the caller's transaction.

    ``planned`` is the plan when the caller just made it (task creation); otherwise the
    task's stored targets are planned again. An import-only task (``scan`` false) and an
    ``import`` run queue nothing: the import adds its own execution. Raises ``NotFound``
    (``task_not_found``) for a missing or deleted task and ``Conflict`` (``run_active``)
    while another run of the task is queued or running.
    """
    if trigger not in RUN_TRIGGERS:
        raise ValidationError(
            "trigger must be one of " + ", ".join(RUN_TRIGGERS),
            code="invalid_parameter",
            details={"field": "trigger"},
        )
    task = conn.execute(
        sa.text(
            """
            SELECT id, targets, ports, transports, profile, scan, deleted_at
              FROM scan_tasks WHERE id = :id FOR UPDATE
            """
        ),
        {"id": task_id},
    ).one_or_none()
    if task is None or task.deleted_at is not None:
        raise NotFound("task not found", code="task_not_found")
    if not task.scan and trigger != "import":
        raise Conflict(
            "this task only imports results; it has no scan to run",
            code="task_import_only",
            details={"task_id": task_id},
        )
    active = active_run_id(conn, task_id)
    if active is not None:
        raise Conflict(
            "a run of this task is already queued or running",
            code="run_active",
            details={"run_id": active},
        )
    run_id = conn.execute(
        sa.text(
            """
            INSERT INTO task_runs (task_id, number, status, trigger)
            SELECT :task, coalesce(max(number), 0) + 1, 'queued', :trigger
              FROM task_runs WHERE task_id = :task
            RETURNING id
            """
        ),
        {"task": task_id, "trigger": trigger},
    ).scalar_one()
    if trigger != "import":
        if limits is None:
            raise ValueError("a scan run needs the scan limits")
        if planned is None:
            planned = plan_executions(
                stored_targets(list(task.targets)), limits.execution_max_addresses
            )
        insert_executions(
            conn,
            task_id=task_id,
            run_id=run_id,
            planned=planned,
            ports=task.ports,
            transports=list(task.transports),
            profile=task.profile,
            max_attempts=limits.max_attempts,
        )
        conn.execute(
            sa.text(
                "UPDATE scan_tasks SET execution_count = execution_count + :n, updated_at = now() "
                "WHERE id = :id"
            ),
            {"id": task_id, "n": len(planned)},
        )
        aggregate_task_status(conn, task_id)
    return get_run(conn, task_id, run_id)


def run_for_import(conn: Connection, task_id: int) -> int:
    """The run an import joins: the task's active run (a scan run still going, or another
    import's), else a new ``import`` run."""
    active = active_run_id(conn, task_id)
    if active is not None:
        return active
    return queue_run(conn, task_id, trigger="import", limits=None).id


def get_run(conn: Connection, task_id: int, run_id: int) -> Run:
    row = conn.execute(
        sa.text(f"{RUN_SELECT} WHERE r.id = :run AND r.task_id = :task"),
        {"run": run_id, "task": task_id},
    ).one_or_none()
    if row is None:
        raise NotFound("run not found", code="run_not_found")
    return run_from_row(row)


def list_runs(
    conn: Connection, task_id: int, *, limit: int, before_number: int | None = None
) -> tuple[list[Run], int | None]:
    """The task's runs, newest first, keyset-paged by number."""
    rows = conn.execute(
        sa.text(
            f"{RUN_SELECT} WHERE r.task_id = :task AND r.number < :before "
            "ORDER BY r.number DESC LIMIT :limit"
        ),
        {"task": task_id, "before": before_number or 2**31 - 1, "limit": limit + 1},
    ).all()
    runs = [run_from_row(r) for r in rows[:limit]]
    return runs, (runs[-1].number if len(rows) > limit else None)


def latest_finished_run_id(conn: Connection, task_id: int) -> int | None:
    """The run results, changes, exports and reports show by default: the latest that
    finished and was not cancelled (a run cancelled by mistake must not make the task
    look empty; the same runs ``previous_run_id`` compares with)."""
    return conn.execute(
        sa.text(
            """
            SELECT id FROM task_runs
             WHERE task_id = :task AND finished_at IS NOT NULL AND status <> 'cancelled'
             ORDER BY number DESC LIMIT 1
            """
        ),
        {"task": task_id},
    ).scalar()


def previous_run_id(conn: Connection, task_id: int, run_id: int) -> int | None:
    """The run before ``run_id`` of the same task (cancelled runs skipped)."""
    return conn.execute(
        sa.text(
            """
            SELECT p.id FROM task_runs r
              JOIN task_runs p ON p.task_id = r.task_id AND p.number < r.number
             WHERE r.id = :run AND r.task_id = :task AND p.status <> 'cancelled'
             ORDER BY p.number DESC LIMIT 1
            """
        ),
        {"task": task_id, "run": run_id},
    ).scalar()


def resolve_run(conn: Connection, task_id: int, run_id: int | None) -> int | None:
    """``run_id`` checked to be the task's; when None, the latest finished run (or, before
    any run finished, the latest run); None only for a task without runs."""
    if run_id is None:
        latest = latest_finished_run_id(conn, task_id)
        if latest is None:
            latest = conn.execute(
                sa.text(
                    "SELECT id FROM task_runs WHERE task_id = :task ORDER BY number DESC LIMIT 1"
                ),
                {"task": task_id},
            ).scalar()
        return latest
    found = conn.execute(
        sa.text("SELECT 1 FROM task_runs WHERE id = :run AND task_id = :task"),
        {"run": run_id, "task": task_id},
    ).scalar()
    if not found:
        raise run_not_found(run_id, "run")
    return run_id


def run_not_found(run_id: int, parameter: str) -> NotFound:
    """The 404 of a run parameter naming no run of the task (every route says it alike)."""
    return NotFound(
        f"no run of this task has the id {run_id} ({parameter} takes a run's id, not its number)",
        code="run_not_found",
        details={"parameter": parameter},
    )


def run_execution_ids(conn: Connection, run_id: int, *, succeeded_only: bool = False) -> list[int]:
    return list(
        conn.execute(
            sa.text(
                "SELECT id FROM scan_executions WHERE run_id = :run "
                "AND (NOT :succeeded OR status = 'succeeded') ORDER BY id"
            ),
            {"run": run_id, "succeeded": succeeded_only},
        ).scalars()
    )


# --- services with their own transactions (routes, console, CLI, scheduler) ---


def _visible_task(conn: Connection, user: User | None, task_id: int) -> None:
    """NotFound unless the task exists, is not deleted and (for a user) is theirs."""
    if not task_visible(conn, user, task_id):
        raise NotFound("task not found", code="task_not_found")


def start_run(task_id: int, *, trigger: str, limits: ScanSettings, user: User | None = None) -> Run:
    """Start the task's next run now (one short transaction); ``user`` None is the system
    (the scheduler), which may start any task's run. 409 ``run_active`` while one is active."""
    with transaction() as conn:
        _visible_task(conn, user, task_id)
        run = queue_run(conn, task_id, trigger=trigger, limits=limits)
    emit(
        "TaskRunStarted",
        task_id=task_id,
        run_id=run.id,
        number=run.number,
        trigger=trigger,
        executions=run.counts["executions"]["total"],
    )
    return run


def runs_of_task(
    user: User, task_id: int, *, limit: int, before_number: int | None = None
) -> tuple[list[Run], int | None]:
    with transaction() as conn:
        _visible_task(conn, user, task_id)
        return list_runs(conn, task_id, limit=limit, before_number=before_number)


def find_run(user: User, task_id: int, run_id: int) -> Run:
    with transaction() as conn:
        _visible_task(conn, user, task_id)
        return get_run(conn, task_id, run_id)


def cancel_run(user: User | None, task_id: int, run_id: int) -> Run:
    """Cancel an active run: its queued and running executions become ``cancelled``.

    A running execution's scanner learns it at its next lease renewal or upload (409
    ``execution_cancelled``) and stops. What was confirmed stays; the run never marks
    endpoints gone. Cancelling a finished run is 409 ``run_not_active``.
    """
    with transaction() as conn:
        _visible_task(conn, user, task_id)
        run = get_run(conn, task_id, run_id)
        if run.status not in ACTIVE_RUN_STATUSES:
            raise Conflict(
                "the run is not queued or running",
                code="run_not_active",
                details={"run_id": run_id, "status": run.status},
            )
        cancelled = conn.execute(
            sa.text(
                """
                UPDATE scan_executions
                   SET status = 'cancelled', finished_at = now(), updated_at = now(),
                       last_error = 'cancelled'
                 WHERE run_id = :run AND status IN ('queued', 'running')
                RETURNING status
                """
            ),
            {"run": run_id},
        ).all()
        conn.execute(sa.text("SELECT 1 FROM scan_tasks WHERE id = :id FOR UPDATE"), {"id": task_id})
        conn.execute(
            sa.text(
                """
                UPDATE task_runs
                   SET status = 'cancelled', finished_at = now(),
                       -- a run cancelled while queued never started
                       started_at = coalesce(started_at,
                                             (SELECT min(e.started_at) FROM scan_executions e
                                               WHERE e.run_id = :run)),
                       cancelled_by = :user
                 WHERE id = :run AND status IN ('queued', 'running')
                """
            ),
            {"run": run_id, "user": user.id if user is not None else None},
        )
        aggregate_task_status(conn, task_id)
        run = get_run(conn, task_id, run_id)
    emit("TaskRunCancelled", task_id=task_id, run_id=run_id, executions=len(cancelled))
    return run


def results_scope(user: User, task_id: int, run_id: int | None) -> list[int]:
    """The executions whose results a task's results show: those of run ``run_id``, by
    default the latest finished run (or the latest run before any finished); ``NotFound``
    for a task the user may not see or a run not of this task."""
    with transaction() as conn:
        _visible_task(conn, user, task_id)
        run = resolve_run(conn, task_id, run_id)
        if run is None:
            return []
        return run_execution_ids(conn, run)
