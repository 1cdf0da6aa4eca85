"""A finished scan for a bench to hang its seeded rows on: a succeeded task and its one
succeeded port-scan execution (and so its run), written straight into their tables in
the caller's transaction, as no scanner took part."""

from __future__ import annotations

import json
from typing import NamedTuple

import sqlalchemy as sa
from sqlalchemy.engine import Connection


class FinishedExecution(NamedTuple):
    task_id: int
    execution_id: int
    run_id: int


def finished_execution(
    conn: Connection, owner_id: int, *, targets: list[str], ports: str
) -> FinishedExecution:
    """A task of ``owner_id`` over ``targets`` and ``ports`` (TCP) whose one execution
    finished now; the run the execution belongs to is left as the task made it."""
    values = {"targets": json.dumps(targets), "ports": ports}
    task_id = conn.execute(
        sa.text(
            "INSERT INTO scan_tasks (owner_id, name, status, targets, ports, transports, "
            "scan_plan) VALUES (:o, 'bench', 'succeeded', CAST(:targets AS jsonb), :ports, "
            "'{tcp}', '{}') RETURNING id"
        ),
        {"o": owner_id, **values},
    ).scalar_one()
    row = conn.execute(
        sa.text(
            "INSERT INTO scan_executions (task_id, kind, status, targets, ports, transports, "
            "finished_at) VALUES (:t, 'ports', 'succeeded', CAST(:targets AS jsonb), :ports, "
            "'{tcp}', clock_timestamp()) RETURNING id, run_id"
        ),
        {"t": task_id, **values},
    ).one()
    return FinishedExecution(task_id, row.id, row.run_id)
