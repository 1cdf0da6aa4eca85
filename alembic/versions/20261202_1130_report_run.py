"""An on-demand report of one task may show a chosen run (issue 33: reports take ``run``).

Revision ID: 20261202_1130
Revises: 20261202_1120
Create Date: 2026-12-02

``reports.run_id`` is the run the report was asked to show; NULL (every scheduled
report, and on-demand ones that name no run) keeps each task's latest finished run. A
run purged later leaves the report as it was rendered.
"""

from __future__ import annotations

from alembic import op

revision = "20261202_1130"
down_revision = "20261202_1120"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "ALTER TABLE reports ADD COLUMN run_id bigint REFERENCES task_runs (id) ON DELETE SET NULL"
    )


def downgrade() -> None:
    op.execute("ALTER TABLE reports DROP COLUMN IF EXISTS run_id")
