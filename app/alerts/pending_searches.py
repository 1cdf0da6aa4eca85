"""Change sets whose search-filtered rules are still to be evaluated (``alert_searched_pending``).

A search store that cannot test assets inside the analysis's statement (Elasticsearch)
is asked about a change set's assets after the analysis has committed it, since no
database transaction may wait on the search store. The analysis's transaction records
here that the execution's search-filtered rules are due (``record``); the transaction
that creates their messages deletes the row (``take``), so whichever process gets there
first does it, once. While a run has a row here its digests wait (``run_awaits``): they
must count what those rules will find.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection


@dataclass(frozen=True)
class PendingChangeSet:
    """An execution whose change set the search-filtered rules have not seen yet."""

    execution_id: int
    run_id: int
    owner_id: int
    task_id: int
    # When the analysis committed the change set (its transaction's start): the rules it
    # is compared with are those that existed then, as in the in-database test.
    created_at: datetime


_RECORD = sa.text(
    """
    INSERT INTO alert_searched_pending (execution_id, run_id, owner_id)
    VALUES (:execution_id, :run_id, :owner_id)
    ON CONFLICT (execution_id) DO NOTHING
    """
)

_READ = sa.text(
    """
    SELECT p.execution_id, p.run_id, p.owner_id, e.task_id, p.created_at
      FROM alert_searched_pending p JOIN scan_executions e ON e.id = p.execution_id
     WHERE p.execution_id = :execution_id
    """
)

_DUE = sa.text("SELECT execution_id FROM alert_searched_pending ORDER BY execution_id LIMIT :limit")


def record(conn: Connection, *, execution_id: int, run_id: int, owner_id: int) -> None:
    """On the analysis's transaction: the execution's search-filtered rules are due."""
    conn.execute(_RECORD, {"execution_id": execution_id, "run_id": run_id, "owner_id": owner_id})


def read(conn: Connection, execution_id: int) -> PendingChangeSet | None:
    row = conn.execute(_READ, {"execution_id": execution_id}).one_or_none()
    if row is None:
        return None
    return PendingChangeSet(row.execution_id, row.run_id, row.owner_id, row.task_id, row.created_at)


def due(conn: Connection, *, limit: int) -> list[int]:
    """Executions still pending, oldest first (the recovery job's list)."""
    return list(conn.execute(_DUE, {"limit": limit}).scalars())


def take(conn: Connection, execution_id: int) -> bool:
    """Delete the execution's row; False when another transaction already did (and
    created the messages). The caller holds the run's lock, so takers take turns."""
    deleted = conn.execute(
        sa.text("DELETE FROM alert_searched_pending WHERE execution_id = :e RETURNING 1"),
        {"e": execution_id},
    ).first()
    return deleted is not None


def run_awaits(conn: Connection, run_id: int) -> bool:
    """True while an execution of the run has search-filtered rules still to evaluate."""
    return bool(
        conn.execute(
            sa.text("SELECT EXISTS (SELECT 1 FROM alert_searched_pending WHERE run_id = :r)"),
            {"r": run_id},
        ).scalar()
    )
