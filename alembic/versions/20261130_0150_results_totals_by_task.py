"""Execution-endpoint counters name their task, for a task's results totals (ING-10).

Revision ID: 20261130_0150
Revises: 20261130_0140
Create Date: 2026-11-30

The first page of ``GET /api/tasks/<id>/results`` counted the task's endpoints and
distinct addresses with ``count(*)``/``count(DISTINCT ip)`` over its rows, a cost
that grew with the task while it was being written. ``search_execution_endpoint_counts``
already holds exact per-execution numbers, kept in the same statement as the rows; with
the task beside them, the totals are the sum over the task's executions (addresses:
distinct over ``search_execution_ips`` when a task has several executions).

The upgrade fills ``task_id`` of the counters already there from the rows, under a
lock that keeps writers out meanwhile. Stop old instances first, as for every release:
code from before this revision writes counters without their task. The results query
shape itself needs no new index: ``ix_search_execution_endpoints_task_order`` (0010)
is exactly its order.
"""

from alembic import op

revision = "20261130_0150"
down_revision = "20261130_0140"
branch_labels = None
depends_on = None

UPGRADE = r"""
ALTER TABLE search_execution_endpoint_counts ADD COLUMN task_id bigint;

LOCK TABLE search_execution_endpoints, search_execution_endpoint_counts IN SHARE MODE;
UPDATE search_execution_endpoint_counts c
   SET task_id = e.task_id
  FROM (SELECT DISTINCT execution_id, task_id FROM search_execution_endpoints) e
 WHERE e.execution_id = c.execution_id;

CREATE INDEX ix_search_execution_endpoint_counts_task
    ON search_execution_endpoint_counts (task_id);
"""

DOWNGRADE = r"""
DROP INDEX IF EXISTS ix_search_execution_endpoint_counts_task;
ALTER TABLE search_execution_endpoint_counts DROP COLUMN IF EXISTS task_id;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
