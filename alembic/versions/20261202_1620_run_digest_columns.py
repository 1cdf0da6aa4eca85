"""A run digest no longer copies its run's owner and task.

Revision ID: 20261202_1620
Revises: 20261202_1610
Create Date: 2026-12-02

Migration 1500 gave ``alert_run_digests`` an ``owner_id`` and a ``task_id`` copied from
the rule and the run. Nothing reads them: the digest job joins the rule and the run
(``task_runs``) for both, and a copy that must be kept equal to its source is a way to disagree with it. They are
dropped here rather than edited out of 1500, which databases have already run.
"""

from __future__ import annotations

from alembic import op

revision = "20261202_1620"
down_revision = "20261202_1610"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "ALTER TABLE alert_run_digests DROP COLUMN IF EXISTS owner_id, "
        "DROP COLUMN IF EXISTS task_id"
    )


def downgrade() -> None:
    # Refilled as 1500's writer filled them (the rule's owner, the run's task), then made
    # NOT NULL as 1500 made them.
    op.execute(
        """
        ALTER TABLE alert_run_digests ADD COLUMN owner_id bigint, ADD COLUMN task_id bigint;
        UPDATE alert_run_digests d SET owner_id = a.owner_id, task_id = r.task_id
          FROM task_runs r, alert_rules a WHERE r.id = d.run_id AND a.id = d.rule_id;
        ALTER TABLE alert_run_digests ALTER COLUMN owner_id SET NOT NULL,
                                      ALTER COLUMN task_id SET NOT NULL;
        """
    )
