"""An import-only task with no import yet is ``idle``, not ``queued``.

Revision ID: 20261208_0100
Revises: 20261207_3000
Create Date: 2026-12-08

Owned by ``app/scan_control``:

* ``scan_tasks.status`` may be ``idle``: a task made with ``"scan": false`` has no run
  until its first import, and nothing is queued for it, yet it read ``queued`` (and a
  ``status=queued`` filter listed it beside tasks waiting for a scanner). Its first
  import's run gives it that run's status, as before. Existing import-only tasks with
  no run become ``idle``.
"""

from __future__ import annotations

from alembic import op

revision = "20261208_0100"
down_revision = "20261207_3000"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        ALTER TABLE scan_tasks DROP CONSTRAINT scan_tasks_status_check;
        ALTER TABLE scan_tasks ADD CONSTRAINT scan_tasks_status_check
            CHECK (status IN ('idle', 'queued', 'running', 'succeeded', 'partially_failed',
                              'failed', 'cancelled'));
        UPDATE scan_tasks t SET status = 'idle'
         WHERE NOT t.scan AND t.status = 'queued'
           AND NOT EXISTS (SELECT 1 FROM task_runs r WHERE r.task_id = t.id);
        """
    )


def downgrade() -> None:
    op.execute(
        """
        UPDATE scan_tasks SET status = 'queued' WHERE status = 'idle';
        ALTER TABLE scan_tasks DROP CONSTRAINT scan_tasks_status_check;
        ALTER TABLE scan_tasks ADD CONSTRAINT scan_tasks_status_check
            CHECK (status IN ('queued', 'running', 'succeeded', 'partially_failed', 'failed',
                              'cancelled'));
        """
    )
