"""Deleting a task and purging old runs, scan control's side (issue 33, architecture "Runs").

``request_delete`` hides the task (and the DNS follow-up tasks it made) at once
(``deleted_at``: every list and lookup skips it), cancels what is still queued or
running, and queues one ``task_purges`` row. The runner's purge job
(``jobs/task_purge.py``) claims that row under a lease (``claim_token``,
``lease_expires_at``; the lease kit's heartbeat renews it) and works through phases,
each in bounded batches whose checkpoint repeats the token and the lease, so a purge
whose worker died is taken over where it stopped:

* ``assets`` — the search store removes the current assets only these tasks had evidence
  for (``cursor``: where its walk of the execution endpoints by id stopped,
  ``app.search.ids.cursor_key``);
* ``executions`` — a batch of executions at a time: their store data, their analysis
  rows, then the execution rows themselves (receipts, streams, DNS answers, outbox and
  queue rows go with them by foreign key);
* ``rows`` — the runs and the task rows; the purge row stays ``done`` with its counts.

The same execution batches purge the runs beyond ``[scan] keep_runs`` of a task
(``old_run_executions``, the ``run-retention`` periodic job).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.db import transaction
from app.errors import NotFound
from app.identity.users import User
from app.leases.sql import LeasedRows
from app.observability import emit
from app.scan_control.dispatch import aggregate_task_status

PURGE_PHASES = ("assets", "executions", "rows")
PURGE_ROWS = LeasedRows("task_purges", "task_id", "status = 'running'")

_OWNED = "task_id = :task_id AND claim_token = :token AND lease_expires_at > now()"


def _status(row: Any) -> dict[str, Any]:
    return {
        "task_id": row.task_id,
        "status": row.status,
        "phase": row.phase,
        "removed": row.removed,
        "batches": row.batches,
        "attempts": row.attempts,
        "last_error": row.last_error,
        "created_at": row.created_at.isoformat(),
        "finished_at": row.finished_at.isoformat() if row.finished_at else None,
    }


def request_delete(user: User, task_id: int) -> dict[str, Any]:
    """Hide the task now and queue its purge; returns the purge's status (202)."""
    with transaction() as conn:
        task = conn.execute(
            sa.text(
                "SELECT owner_id FROM scan_tasks WHERE id = :id AND deleted_at IS NULL FOR UPDATE"
            ),
            {"id": task_id},
        ).one_or_none()
        if task is None or (not user.is_admin and task.owner_id != user.id):
            raise NotFound("task not found", code="task_not_found")
        tree = task_tree(conn, task_id)
        conn.execute(
            sa.text(
                "UPDATE scan_executions SET status = 'cancelled', finished_at = now(), "
                "updated_at = now(), last_error = 'task deleted' "
                "WHERE task_id = ANY(:ids) AND status IN ('queued', 'running')"
            ),
            {"ids": tree},
        )
        conn.execute(
            sa.text(
                "UPDATE task_runs SET status = 'cancelled', finished_at = now() "
                "WHERE task_id = ANY(:ids) AND status IN ('queued', 'running')"
            ),
            {"ids": tree},
        )
        conn.execute(
            sa.text(
                "UPDATE scan_tasks SET deleted_at = now(), updated_at = now() WHERE id = ANY(:ids)"
            ),
            {"ids": tree},
        )
        row = conn.execute(
            sa.text(
                """
                INSERT INTO task_purges (task_id, owner_id) VALUES (:id, :owner)
                ON CONFLICT (task_id) DO UPDATE SET task_id = excluded.task_id
                RETURNING *
                """
            ),
            {"id": task_id, "owner": task.owner_id},
        ).one()
    emit("TaskDeleted", task_id=task_id, user_id=user.id, tasks=len(tree))
    return _status(row)


def purge_status(user: User, task_id: int) -> dict[str, Any]:
    with transaction() as conn:
        row = conn.execute(
            sa.text("SELECT * FROM task_purges WHERE task_id = :id"), {"id": task_id}
        ).one_or_none()
    if row is None or (not user.is_admin and row.owner_id != user.id):
        raise NotFound("no purge of this task", code="purge_not_found")
    return _status(row)


def task_tree(conn: Connection, task_id: int) -> list[int]:
    """The task and every task below it (DNS follow-ups), deleted or not."""
    return list(
        conn.execute(
            sa.text(
                """
                WITH RECURSIVE tree AS (
                    SELECT id FROM scan_tasks WHERE id = :id
                    UNION ALL
                    SELECT c.id FROM scan_tasks c JOIN tree ON c.parent_task_id = tree.id
                )
                SELECT id FROM tree
                """
            ),
            {"id": task_id},
        ).scalars()
    )


@dataclass(frozen=True)
class PurgeClaim:
    task_id: int
    owner_id: int
    claim_token: uuid.UUID
    phase: str
    cursor: int | None
    task_ids: tuple[int, ...]
    claimed_monotonic: float = 0.0  # when the claim was sent (the lease guard's start)
    lease_seconds: float = 60.0  # the lease the claim took (each renewal extends by it)


def claim_next_purge(*, lease_seconds: float) -> PurgeClaim | None:
    """The next purge that is queued, or running under an expired lease (taken over)."""
    sent = time.monotonic()
    with transaction() as conn:
        row = conn.execute(
            sa.text(
                """
                WITH next AS (
                    SELECT task_id FROM task_purges
                     WHERE status <> 'done' AND available_at <= now()
                       AND (lease_expires_at IS NULL OR lease_expires_at <= now())
                     ORDER BY available_at, task_id
                     LIMIT 1 FOR UPDATE SKIP LOCKED
                )
                UPDATE task_purges p
                   SET status = 'running', claim_token = gen_random_uuid(),
                       lease_expires_at = now() + make_interval(secs => :lease),
                       attempts = p.attempts + 1
                  FROM next WHERE p.task_id = next.task_id
                RETURNING p.task_id, p.owner_id, p.claim_token, p.phase, p.cursor
                """
            ),
            {"lease": lease_seconds},
        ).one_or_none()
        if row is None:
            return None
        tree = task_tree(conn, row.task_id)
    return PurgeClaim(
        task_id=row.task_id,
        owner_id=row.owner_id,
        claim_token=row.claim_token,
        phase=row.phase,
        cursor=row.cursor,
        task_ids=tuple(tree) or (row.task_id,),
        claimed_monotonic=sent,
        lease_seconds=lease_seconds,
    )


class PurgeLost(Exception):
    """The purge's lease was lost: another worker has (or will take) it over."""


def checkpoint(
    claim: PurgeClaim, *, phase: str, cursor: int | None, removed: dict[str, int]
) -> None:
    """Save the purge's position, add ``removed`` to its counts and count the batch
    (token + lease checked)."""
    with transaction() as conn:
        saved = conn.execute(
            sa.text(
                f"""
                UPDATE task_purges
                   SET phase = :phase, cursor = :cursor, batches = batches + 1,
                       removed = (
                           SELECT coalesce(jsonb_object_agg(k, v), '{{}}'::jsonb) FROM (
                               SELECT k, sum(v)::bigint AS v FROM (
                                   SELECT key AS k, value::bigint AS v FROM jsonb_each_text(removed)
                                   UNION ALL
                                   SELECT key, value::bigint
                                     FROM jsonb_each_text(CAST(:added AS jsonb))
                               ) x GROUP BY k
                           ) y)
                 WHERE {_OWNED}
                RETURNING 1
                """  # noqa: S608 - _OWNED is a module constant; values are bound
            ),
            {
                "task_id": claim.task_id,
                "token": claim.claim_token,
                "phase": phase,
                "cursor": cursor,
                "added": json.dumps(removed),
            },
        ).scalar()
    if not saved:
        raise PurgeLost(f"purge of task {claim.task_id}: lease lost")


def deleted_task_ids() -> list[int]:
    """Every deleted task not purged yet: their evidence does not keep an asset."""
    with transaction() as conn:
        return list(
            conn.execute(
                sa.text("SELECT id FROM scan_tasks WHERE deleted_at IS NOT NULL")
            ).scalars()
        )


def execution_batch(task_ids: tuple[int, ...], *, limit: int) -> list[int]:
    with transaction() as conn:
        return list(
            conn.execute(
                sa.text(
                    "SELECT id FROM scan_executions WHERE task_id = ANY(:ids) ORDER BY id "
                    "LIMIT :limit"
                ),
                {"ids": list(task_ids), "limit": limit},
            ).scalars()
        )


def delete_executions(execution_ids: list[int]) -> int:
    """Delete execution rows whose store and analysis data are already gone."""
    with transaction() as conn:
        return conn.execute(
            sa.text("DELETE FROM scan_executions WHERE id = ANY(:ids)"), {"ids": execution_ids}
        ).rowcount


def finish(claim: PurgeClaim) -> dict[str, int]:
    """The last phase: the runs and task rows go; the purge row is done (token checked)."""
    with transaction() as conn:
        owned = conn.execute(
            sa.text(f"SELECT 1 FROM task_purges WHERE {_OWNED} FOR UPDATE"),  # noqa: S608 - _OWNED is a module constant
            {"task_id": claim.task_id, "token": claim.claim_token},
        ).scalar()
        if not owned:
            raise PurgeLost(f"purge of task {claim.task_id}: lease lost")
        ids = list(claim.task_ids)
        runs = conn.execute(
            sa.text("DELETE FROM task_runs WHERE task_id = ANY(:ids)"), {"ids": ids}
        ).rowcount
        tasks = conn.execute(
            sa.text("DELETE FROM scan_tasks WHERE id = ANY(:ids) AND deleted_at IS NOT NULL"),
            {"ids": ids},
        ).rowcount
        conn.execute(
            sa.text(
                """
                UPDATE task_purges
                   SET status = 'done', phase = 'rows', finished_at = now(),
                       claim_token = NULL, lease_expires_at = NULL, last_error = NULL,
                       removed = removed || jsonb_build_object('runs', CAST(:runs AS bigint),
                                                               'tasks', CAST(:tasks AS bigint))
                 WHERE task_id = :task_id
                """
            ),
            {"task_id": claim.task_id, "runs": runs, "tasks": tasks},
        )
    return {"runs": runs, "tasks": tasks}


def give_up(claim: PurgeClaim, error: str, *, retry_seconds: float) -> None:
    """An error: release the row with the error; it is claimed again after a pause."""
    with transaction() as conn:
        conn.execute(
            sa.text(
                f"""
                UPDATE task_purges
                   SET claim_token = NULL, lease_expires_at = NULL, last_error = :error,
                       available_at = now() + make_interval(secs => :retry)
                 WHERE {_OWNED}
                """  # noqa: S608 - _OWNED is a module constant; values are bound
            ),
            {
                "task_id": claim.task_id,
                "token": claim.claim_token,
                "error": error[:1000],
                "retry": retry_seconds,
            },
        )


def old_run_executions(*, keep_runs: int, limit: int) -> tuple[list[int], list[int]]:
    """Executions of finished runs beyond the newest ``keep_runs`` of their task (at most
    ``limit``), and the old runs that have no execution left (to delete)."""
    with transaction() as conn:
        old = """
            SELECT r.id FROM task_runs r
             WHERE r.finished_at IS NOT NULL
               AND r.number <= (SELECT max(n.number) FROM task_runs n
                                 WHERE n.task_id = r.task_id) - :keep
        """
        executions = list(
            conn.execute(
                sa.text(
                    f"SELECT e.id FROM scan_executions e WHERE e.run_id IN ({old}) "  # noqa: S608 - a module constant; values are bound
                    "ORDER BY e.id LIMIT :limit"
                ),
                {"keep": keep_runs, "limit": limit},
            ).scalars()
        )
        empty = list(
            conn.execute(
                sa.text(
                    f"SELECT id FROM ({old}) o WHERE NOT EXISTS "  # noqa: S608 - a module constant; values are bound
                    "(SELECT 1 FROM scan_executions e WHERE e.run_id = o.id) LIMIT :limit"
                ),
                {"keep": keep_runs, "limit": limit},
            ).scalars()
        )
    return executions, empty


def delete_runs(run_ids: list[int]) -> int:
    """Old runs without executions left; their tasks' status stays their newest run's."""
    with transaction() as conn:
        tasks = list(
            conn.execute(
                sa.text("DELETE FROM task_runs WHERE id = ANY(:ids) RETURNING task_id"),
                {"ids": run_ids},
            ).scalars()
        )
        for task_id in sorted(set(tasks)):
            aggregate_task_status(conn, task_id)
    return len(tasks)


def all_execution_ids(task_ids: tuple[int, ...]) -> list[int]:
    with transaction() as conn:
        return list(
            conn.execute(
                sa.text("SELECT id FROM scan_executions WHERE task_id = ANY(:ids)"),
                {"ids": list(task_ids)},
            ).scalars()
        )


def postpone(claim: PurgeClaim, seconds: float) -> None:
    """Release the purge (phase and cursor kept) until ``seconds`` from now."""
    with transaction() as conn:
        conn.execute(
            sa.text(
                f"""
                UPDATE task_purges
                   SET claim_token = NULL, lease_expires_at = NULL,
                       available_at = now() + make_interval(secs => :wait)
                 WHERE {_OWNED}
                """  # noqa: S608 - _OWNED is a module constant; values are bound
            ),
            {"task_id": claim.task_id, "token": claim.claim_token, "wait": seconds},
        )
