"""Which tasks a caller may see: users their own, admins all, nobody a deleted one.

One rule for every reader of ``scan_tasks`` in scan control (task queries, runs, run
views, services), kept in this leaf module so that each of them can ask it.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.identity.users import User
from app.sql_filters import Filters


def owner_filter(user: User) -> Filters:
    """Users see their own tasks (``t``), admins see all; a deleted task nobody sees."""
    where = Filters().add("t.deleted_at IS NULL")
    if user.is_admin:
        return where
    return where.add("t.owner_id = :owner_id", owner_id=user.id)


def task_visible(conn: Connection, user: User | None, task_id: int) -> bool:
    """Whether the task exists, is not deleted and is the user's (any user's for an admin;
    ``None``: the system's own callers, the scheduler and the CLI, see every task)."""
    where = Filters().add("t.id = :id", id=task_id)
    where = where.add("t.deleted_at IS NULL") if user is None else where.extend(owner_filter(user))
    return bool(
        conn.execute(
            sa.text(f"SELECT 1 FROM scan_tasks t WHERE {where.sql()}"),  # noqa: S608 - fixed WHERE fragments; values are bound
            where.params,
        ).scalar()
    )


def task_not_deleted_sql(column: str) -> str:
    """SQL: the task ``column`` names (NULL: none) is not deleted, for the rows other
    packages keep about a task (report definitions): a deleted task's are skipped by every
    list and lookup from its deletion on, before the purge removes them."""
    return (
        f"NOT EXISTS (SELECT 1 FROM scan_tasks dt WHERE dt.id = {column} "  # noqa: S608 - a column name of the caller's
        "AND dt.deleted_at IS NOT NULL)"
    )
