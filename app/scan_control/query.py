"""Task and execution queries, owner-scoped, with keyset pagination (SCN-5, IDN-6).

Lists page by ``id`` descending (newest first) using the last id as the cursor,
so a page costs the same whatever its depth. Every query takes the caller's
identity: users see their own tasks, admins see all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.analysis.queries import execution_change_counts, task_change_counts
from app.identity.users import User
from app.projection.status import aggregate_projection_status, projection_status_sql
from app.scan_control.runs import RUN_SELECT, resolve_run, run_from_row
from app.scan_control.schedule_store import schedule_view
from app.scan_control.visibility import owner_filter as _owner_filter
from app.sql_filters import Filters

# ``idle``: an import-only task before its first import (nothing is queued for it).
TASK_STATUSES = (
    "idle",
    "queued",
    "running",
    "succeeded",
    "partially_failed",
    "failed",
    "cancelled",
)


@dataclass(frozen=True)
class Page:
    items: list[dict[str, Any]]
    next_cursor: dict[str, Any] | None


def _task_dict(row: Any) -> dict[str, Any]:
    return {
        "id": row.id,
        "name": row.name,
        "status": row.status,
        "targets": row.targets,
        "ports": row.ports,
        "transports": list(row.transports),
        "profile": row.profile,
        "scan": row.scan,
        "owner_id": row.owner_id,
        "parent_task_id": row.parent_task_id,
        "execution_count": row.execution_count,
        "created_at": row.created_at.isoformat(),
        "updated_at": row.updated_at.isoformat(),
        "finished_at": row.finished_at.isoformat() if row.finished_at else None,
    }


_TASK_COLUMNS = """
    t.id, t.name, t.status, t.targets, t.ports, t.transports, t.owner_id, t.parent_task_id,
    t.execution_count, t.created_at, t.updated_at, t.finished_at, t.profile, t.scan
"""


def list_tasks(
    conn: Connection,
    user: User,
    *,
    limit: int,
    cursor: dict[str, Any] | None,
    status: str | None = None,
    name_contains: str | None = None,
    parent_task_id: int | None = None,
) -> Page:
    where = _owner_filter(user)
    if cursor is not None:
        where.add("t.id < :after_id", after_id=int(cursor["id"]))
    if status:
        where.add("t.status = :status", status=status)
    if name_contains:
        escaped = name_contains.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        where.add("t.name ILIKE :name_pattern ESCAPE '\\'", name_pattern=f"%{escaped}%")
    if parent_task_id is not None:
        where.add("t.parent_task_id = :parent_task_id", parent_task_id=parent_task_id)
    where.bind(limit=limit + 1)
    rows = conn.execute(
        sa.text(
            f"SELECT {_TASK_COLUMNS} FROM scan_tasks t WHERE {where.sql()} "  # noqa: S608 - constant columns and fixed WHERE fragments; values are bound
            "ORDER BY t.id DESC LIMIT :limit"
        ),
        where.params,
    ).all()
    items = [_task_dict(r) for r in rows[:limit]]
    next_cursor = {"id": items[-1]["id"]} if len(rows) > limit else None
    return Page(items=items, next_cursor=next_cursor)


def get_task(conn: Connection, user: User, task_id: int) -> dict[str, Any] | None:
    where = Filters().add("t.id = :id", id=task_id).extend(_owner_filter(user))
    row = conn.execute(
        sa.text(f"SELECT {_TASK_COLUMNS} FROM scan_tasks t WHERE {where.sql()}"),  # noqa: S608 - constant columns and fixed WHERE fragments; values are bound
        where.params,
    ).one_or_none()
    if row is None:
        return None
    task = _task_dict(row)
    executions = conn.execute(
        sa.text(
            f"""
            SELECT e.status, e.kind, e.observation_count, e.endpoint_count,
                   {projection_status_sql("e")} AS projection_status
            FROM scan_executions e WHERE e.task_id = :id
            """  # noqa: S608 - constant columns and fixed WHERE fragments; values are bound
        ),
        {"id": task_id},
    ).all()
    counts = {s: 0 for s in ("queued", "running", "succeeded", "failed", "cancelled")}
    for e in executions:
        counts[e.status] += 1
    task["counts"] = {
        "executions": counts,
        "observations": sum(e.observation_count for e in executions),
        "endpoints": sum(e.endpoint_count for e in executions),
    }
    task["projection_status"] = aggregate_projection_status(
        [e.projection_status for e in executions]
    )
    latest = conn.execute(
        sa.text(f"{RUN_SELECT} WHERE r.task_id = :id ORDER BY r.number DESC LIMIT 1"),
        {"id": task_id},
    ).one_or_none()
    task["latest_run"] = run_from_row(latest).public() if latest is not None else None
    task["changes"] = task_change_counts(conn, task_id)
    task["child_task_ids"] = list(
        conn.execute(
            sa.text("SELECT id FROM scan_tasks WHERE parent_task_id = :id ORDER BY id"),
            {"id": task_id},
        ).scalars()
    )
    task["schedule"] = schedule_view(conn, task_id)
    return task


def succeeded_execution_ids(conn: Connection, task_id: int, run_id: int | None = None) -> list[int]:
    """Ids of the succeeded executions of the task's run ``run_id`` (default: its latest
    finished run, else its latest run), oldest first (what a result export covers)."""
    run = resolve_run(conn, task_id, run_id)
    return list(
        conn.execute(
            sa.text(
                "SELECT id FROM scan_executions WHERE task_id = :task_id AND run_id = :run "
                "AND status = 'succeeded' ORDER BY id"
            ),
            {"task_id": task_id, "run": run},
        ).scalars()
    )


def list_executions(
    conn: Connection, task_id: int, *, limit: int, cursor: dict[str, Any] | None
) -> Page:
    where = Filters(limit=limit + 1).add("e.task_id = :task_id", task_id=task_id)
    if cursor is not None:
        where.add("e.id > :after_id", after_id=int(cursor["id"]))
    rows = conn.execute(
        sa.text(
            f"""
            SELECT e.id, e.task_id, e.run_id, e.kind, e.status, e.targets, e.attempts,
                   e.max_attempts,
                   e.scanner_id, e.lease_expires_at, e.last_error, e.observation_count,
                   e.endpoint_count, e.ip_count, e.started_at, e.finished_at, e.created_at,
                   {projection_status_sql("e")} AS projection_status
            FROM scan_executions e
            WHERE {where.sql()}
            ORDER BY e.id LIMIT :limit
            """  # noqa: S608 - constant columns and fixed WHERE fragments; values are bound
        ),
        where.params,
    ).all()
    items = [
        {
            "id": r.id,
            "task_id": r.task_id,
            "run_id": r.run_id,
            "kind": r.kind,
            "status": r.status,
            "projection_status": r.projection_status,
            "targets": r.targets,
            "attempts": r.attempts,
            "max_attempts": r.max_attempts,
            "scanner_id": r.scanner_id,
            "lease_expires_at": r.lease_expires_at.isoformat() if r.lease_expires_at else None,
            "last_error": r.last_error,
            "observation_count": r.observation_count,
            "endpoint_count": r.endpoint_count,
            "ip_count": r.ip_count,
            "started_at": r.started_at.isoformat() if r.started_at else None,
            "finished_at": r.finished_at.isoformat() if r.finished_at else None,
            "created_at": r.created_at.isoformat(),
        }
        for r in rows[:limit]
    ]
    changes = execution_change_counts(conn, [item["id"] for item in items])
    for item in items:
        item["changes"] = changes[item["id"]]
    next_cursor = {"id": items[-1]["id"]} if len(rows) > limit else None
    return Page(items=items, next_cursor=next_cursor)
