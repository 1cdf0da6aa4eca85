"""Task services for the routes, the console and the CLI: each owns its short transaction.

Routes and console pages do not open transactions themselves (docs/architecture.md,
rule: short transactions); they call these, which wrap the connection-taking functions
of ``creation`` and ``query``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from app.analysis.queries import task_change_counts
from app.config import ScanSettings
from app.db import transaction
from app.errors import NotFound
from app.identity.users import User
from app.observability import emit
from app.scan_control import schedule_store
from app.scan_control.creation import TaskRequest, create_task
from app.scan_control.query import Page, get_task, list_executions, list_tasks
from app.scan_control.runs import latest_runs, resolve_run, run_execution_ids
from app.scan_control.schedule_rules import ScheduleSpec
from app.scan_control.visibility import task_visible


def create_task_for(
    user: User,
    task_request: TaskRequest,
    *,
    limits: ScanSettings,
    via: str = "api",
    schedule: ScheduleSpec | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """Create the task (and run 1 unless import-only), with its schedule when given (its
    first fire time counted from ``now``); returns the task as the API shows it."""
    with transaction() as conn:
        task_id = create_task(conn, owner_id=user.id, request=task_request, limits=limits)
        if schedule is not None:
            schedule_store.save(conn, task_id, schedule, now=now or datetime.now(UTC))
        task = get_task(conn, user, task_id)
    assert task is not None
    emit(
        "TaskCreated",
        task_id=task_id,
        user_id=user.id,
        executions=task["execution_count"],
        via=via,
    )
    return task


def find_task(user: User, task_id: int) -> dict[str, Any]:
    """The task as ``user`` may see it; ``NotFound`` (``task_not_found``) otherwise."""
    with transaction() as conn:
        task = get_task(conn, user, task_id)
    if task is None:
        raise NotFound("task not found", code="task_not_found")
    return task


def tasks_of(
    user: User,
    *,
    limit: int,
    cursor: dict[str, Any] | None,
    status: str | None = None,
    name_contains: str | None = None,
    parent_task_id: int | None = None,
    overview: bool = False,
) -> Page:
    """A page of the user's tasks. ``overview``: each also with its newest run and its
    schedule (``latest_run``, ``schedule``, as one task shows them, the schedule without
    its slots): two more statements in the same transaction, whatever the page's size."""
    with transaction() as conn:
        page = list_tasks(
            conn,
            user,
            limit=limit,
            cursor=cursor,
            status=status,
            name_contains=name_contains,
            parent_task_id=parent_task_id,
        )
        if overview and page.items:
            ids = [task["id"] for task in page.items]
            newest = latest_runs(conn, ids)
            schedules = schedule_store.schedule_briefs(conn, ids)
            for task in page.items:
                run = newest.get(task["id"])
                task["latest_run"] = run.public() if run is not None else None
                task["schedule"] = schedules.get(task["id"])
    return page


def executions_of(user: User, task_id: int, *, limit: int, cursor: dict[str, Any] | None) -> Page:
    with transaction() as conn:
        if not task_visible(conn, user, task_id):
            raise NotFound("task not found", code="task_not_found")
        return list_executions(conn, task_id, limit=limit, cursor=cursor)


def task_page(
    user: User, task_id: int, *, limit: int, cursor: dict[str, Any] | None
) -> tuple[dict[str, Any], Page, dict[str, Any]]:
    """What the console's task page shows: the task, a page of executions, and the change
    counts of the run its changes page shows first (the latest finished run): counts over
    every run linked to a list of one run's changes, which did not hold them."""
    with transaction() as conn:
        task = get_task(conn, user, task_id)
        if task is None:
            raise NotFound("task not found", code="task_not_found")
        executions = list_executions(conn, task_id, limit=limit, cursor=cursor)
        run = resolve_run(conn, task_id, None)
        run_executions = run_execution_ids(conn, run) if run is not None else []
        changes = task_change_counts(conn, task_id, execution_ids=run_executions)
        changes["run_id"] = run
        changes["run_number"] = conn.execute(
            sa.text("SELECT number FROM task_runs WHERE id = :run"), {"run": run}
        ).scalar()
    return task, executions, changes


def user_named(username: str) -> User:
    """The account called ``username`` (the CLI's ``--owner``); ``NotFound`` otherwise."""
    from app.identity.users import find_by_username

    with transaction() as conn:
        user = find_by_username(conn, username)
    if user is None:
        raise NotFound(f"no user named {username!r}", code="user_not_found")
    return user


def active_run_of(user: User, task_id: int) -> int:
    """The task's queued or running run (``run_not_active`` when it has none)."""
    from app.errors import Conflict
    from app.scan_control.runs import active_run_id

    with transaction() as conn:
        if not task_visible(conn, user, task_id):
            raise NotFound("task not found", code="task_not_found")
        run_id = active_run_id(conn, task_id)
    if run_id is None:
        raise Conflict("the task has no queued or running run", code="run_not_active")
    return run_id
