"""What a user may read of tasks, one short transaction per call.

The API routes and the console pages call these same functions (docs/architecture.md,
rule: services own transactions): a task another user owns is "not found" to the
caller the same way on both. The connection-taking queries in ``query`` stay for
callers composing a larger transaction.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from app.analysis.queries import host_changes
from app.db import transaction
from app.errors import NotFound
from app.identity.users import User
from app.scan_control.query import list_tasks
from app.scan_control.visibility import task_visible


def _task_not_found() -> NotFound:
    return NotFound("task not found", code="task_not_found")


def require_visible_task(user: User, task_id: int) -> None:
    """404 ``task_not_found`` unless the user owns the task (or is an admin)."""
    with transaction() as conn:
        if not task_visible(conn, user, task_id):
            raise _task_not_found()


def bounded_task_count(user: User, status: str | None, *, cap: int) -> tuple[int, bool]:
    """How many of the user's tasks have ``status`` (None: any), counted up to ``cap``; and
    whether there are more than that."""
    with transaction() as conn:
        page = list_tasks(conn, user, limit=cap, cursor=None, status=status)
    return len(page.items), page.next_cursor is not None


def scanner_work_waiting(user: User) -> bool:
    """Whether an execution of the user's tasks (any user's, for an admin) waits for a
    scanner or is being scanned: the dashboard's "no scanner is online" warning is about
    that, not about task statuses (an import-only task is ``queued`` with nothing to
    scan). Read through the claim and lease indexes: as many rows as wait or run."""
    with transaction() as conn:
        return bool(
            conn.execute(
                sa.text(
                    """
                    SELECT EXISTS (
                        SELECT 1 FROM scan_executions e JOIN scan_tasks t ON t.id = e.task_id
                         WHERE e.status IN ('queued', 'running') AND e.kind <> 'import'
                           AND t.deleted_at IS NULL AND (:admin OR t.owner_id = :owner)
                    )
                    """
                ),
                {"admin": user.is_admin, "owner": user.id},
            ).scalar()
        )


_HOST_EXECUTIONS = sa.text(
    """
    SELECT e.id AS execution_id, e.task_id, t.name AS task_name, e.status, e.kind,
           e.finished_at, e.profile
      FROM scan_executions e JOIN scan_tasks t ON t.id = e.task_id
     WHERE t.owner_id = :owner_id AND e.kind = 'ports' AND t.deleted_at IS NULL
       AND EXISTS (
           SELECT 1 FROM jsonb_array_elements_text(e.targets) target
            WHERE target ~ '^[0-9A-Fa-f:.]+(/[0-9]{1,3})?$'
              AND CASE WHEN target ~ ':' THEN family(CAST(:ip AS inet)) = 6
                       ELSE family(CAST(:ip AS inet)) = 4 END
              AND CAST(:ip AS inet) <<= CAST(target AS inet))
     ORDER BY e.id DESC
     LIMIT :limit
    """
)


def host_history(
    owner_id: int, ip: str, *, max_executions: int, max_changes: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The owner's newest port executions whose targets cover ``ip``, and the newest
    changes seen on it (the host view), read in one transaction."""
    with transaction() as conn:
        rows = conn.execute(
            _HOST_EXECUTIONS, {"owner_id": owner_id, "ip": ip, "limit": max_executions}
        ).all()
        changes = host_changes(conn, owner_id=owner_id, ip=ip, limit=max_changes)
    executions = [
        {
            "execution_id": row.execution_id,
            "task_id": row.task_id,
            "task_name": row.task_name,
            "status": row.status,
            "profile": row.profile,
            "finished_at": row.finished_at.isoformat() if row.finished_at else None,
        }
        for row in rows
    ]
    return executions, changes


def task_names(task_ids: list[int]) -> dict[int, str]:
    """The names of these tasks (one statement; a purged task has none), for lists that
    show the tasks other packages' rows name (the change feed)."""
    if not task_ids:
        return {}
    with transaction() as conn:
        rows = conn.execute(
            sa.text("SELECT id, name FROM scan_tasks WHERE id = ANY(:ids)"),
            {"ids": sorted(set(task_ids))},
        ).all()
    return {row.id: row.name for row in rows}
