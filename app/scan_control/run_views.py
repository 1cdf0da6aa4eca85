"""A task's changes seen run by run (issue 33): one run's change set, or two runs compared.

Services for the routes and the console: each opens its own short transaction, checks
that the caller may see the task, resolves the run (``run=``; default the latest
finished run) and reads the analysis's tables through ``app.analysis.queries``.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from app.analysis.queries import compare_runs, task_changes
from app.db import transaction
from app.errors import NotFound, ValidationError
from app.identity.users import User
from app.scan_control.runs import resolve_run, run_execution_ids, run_not_found
from app.scan_control.visibility import task_visible


def _run_number(conn, task_id: int, run_id: int, parameter: str) -> int:
    number = conn.execute(
        sa.text("SELECT number FROM task_runs WHERE id = :run AND task_id = :task"),
        {"run": run_id, "task": task_id},
    ).scalar()
    if number is None:
        raise run_not_found(run_id, parameter)
    return int(number)


def run_changes(
    user: User,
    task_id: int,
    *,
    run_id: int | None,
    kind: str | None,
    limit: int,
    cursor: str | None,
) -> dict[str, Any]:
    """One page of the change set of the task's run ``run_id`` (default: latest finished)."""
    with transaction() as conn:
        if not task_visible(conn, user, task_id):
            raise NotFound("task not found", code="task_not_found")
        run = resolve_run(conn, task_id, run_id)
        executions = run_execution_ids(conn, run) if run is not None else []
        page = task_changes(
            conn, task_id, kind=kind, limit=limit, cursor=cursor, execution_ids=executions
        )
    page["run_id"] = run
    return page


def compare(
    user: User,
    task_id: int,
    *,
    from_run: int,
    to_run: int,
    kind: str | None,
    limit: int,
    cursor: str | None,
) -> dict[str, Any]:
    """What differs from run ``from_run`` to run ``to_run`` of a task (either order)."""
    with transaction() as conn:
        if not task_visible(conn, user, task_id):
            raise NotFound("task not found", code="task_not_found")
        first = _run_number(conn, task_id, from_run, "from_run")
        second = _run_number(conn, task_id, to_run, "to_run")
        low, high = sorted((first, second))
        executions = list(
            conn.execute(
                sa.text(
                    """
                    SELECT e.id FROM scan_executions e JOIN task_runs r ON r.id = e.run_id
                     WHERE r.task_id = :task AND r.number > :low AND r.number <= :high
                    """
                ),
                {"task": task_id, "low": low, "high": high},
            ).scalars()
        )
        page = compare_runs(
            conn,
            task_id,
            execution_ids=executions,
            reverse=first > second,
            kind=kind,
            limit=limit,
            cursor=cursor,
        )
    page["from_run"] = from_run
    page["to_run"] = to_run
    return page


def check_run_pair(from_run: int | None, to_run: int | None, run: str | None = None) -> None:
    """``from_run`` and ``to_run`` come together, and not with ``run`` (one change set or
    a comparison: a ``run`` beside a pair was dropped without a word)."""
    if from_run is not None and run:
        raise ValidationError(
            "run lists one run's changes; from_run and to_run compare two: not both",
            code="invalid_parameter",
            details={"parameter": "run"},
        )
    if (from_run is None) != (to_run is None):
        missing = "to_run" if to_run is None else "from_run"
        raise ValidationError(
            "from_run and to_run go together",
            code="invalid_parameter",
            details={"parameter": missing},
        )
