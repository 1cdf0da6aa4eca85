"""Running the task purge in tests and checking what it left (issue 33).

``purge_job`` is the runner's ``TaskPurgeJob`` on a given store (``run_purges`` of
``app.bench.purge`` runs every claimable purge to its end with it); ``leftover_rows``
lists, table by table from the catalogue, the rows that still name a purged task or
execution.
"""

from __future__ import annotations

import threading
from typing import Any

import sqlalchemy as sa

from app.config import Settings
from app.db import transaction
from jobs import task_purge
from jobs.base import JobContext


def job_context(settings: Settings) -> JobContext:
    return JobContext(
        settings=settings, worker_id=0, stopping=threading.Event(), cancelled=threading.Event()
    )


def purge_job(settings: Settings, store: Any) -> task_purge.TaskPurgeJob:
    return task_purge.TaskPurgeJob(settings, store=store)


def purge_row(task_id: int) -> Any:
    with transaction() as conn:
        return conn.execute(
            sa.text("SELECT * FROM task_purges WHERE task_id = :t"), {"t": task_id}
        ).one()


def leftover_rows(task_ids: list[int], execution_ids: list[int]) -> dict[str, int]:
    """Rows naming a deleted task or execution, per table and column, from the catalogue."""
    found: dict[str, int] = {}
    with transaction() as conn:
        columns = conn.execute(
            sa.text(
                """
                SELECT c.table_name, c.column_name FROM information_schema.columns c
                  JOIN information_schema.tables t
                    ON t.table_name = c.table_name AND t.table_schema = c.table_schema
                 WHERE c.table_schema = 'public' AND t.table_type = 'BASE TABLE'
                   AND c.column_name IN ('task_id', 'execution_id', 'parent_task_id')
                   AND c.table_name <> 'task_purges'
                   -- The owner's analysis watermark is a position in time order (finish
                   -- time, then execution id), not a reference: it outlives the execution,
                   -- or a run finished earlier but analysed later would override newer
                   -- decisions (app.analysis.changes).
                   AND c.table_name <> 'analysis_owner_watermarks'
                """
            )
        ).all()
        for table, column in columns:
            ids = execution_ids if column == "execution_id" else task_ids
            count = conn.execute(
                sa.text(f"SELECT count(*) FROM {table} WHERE {column} = ANY(:ids)"),
                {"ids": ids},
            ).scalar()
            if count:
                found[f"{table}.{column}"] = count
        tasks = conn.execute(
            sa.text("SELECT count(*) FROM scan_tasks WHERE id = ANY(:ids)"), {"ids": task_ids}
        ).scalar()
        if tasks:
            found["scan_tasks.id"] = tasks
        runs = conn.execute(
            sa.text("SELECT count(*) FROM task_runs WHERE task_id = ANY(:ids)"), {"ids": task_ids}
        ).scalar()
        if runs:
            found["task_runs.task_id"] = runs
    assert len(columns) >= 10  # the check sees the schema
    return found
