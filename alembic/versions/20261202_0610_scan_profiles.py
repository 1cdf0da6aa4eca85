"""Scan profiles: a task chooses quick, standard or deep; each execution records it (issue 37).

Revision ID: 20261202_0610
Revises: 20261202_0600
Create Date: 2026-12-02

``scan_tasks.profile`` is what the user chose (existing tasks: ``standard``, the new
default). ``scan_executions.profile`` is copied from the task when the execution is
created and sent to the scanner with the claim, so what an execution probed stays
known (the change analysis compares only fields a run probed) even if the task's
profile changes later.
"""

from __future__ import annotations

from alembic import op

revision = "20261202_0610"
down_revision = "20261202_0600"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE scan_tasks
    ADD COLUMN profile text NOT NULL DEFAULT 'standard'
        CONSTRAINT ck_scan_tasks_profile CHECK (profile IN ('quick', 'standard', 'deep'));
ALTER TABLE scan_executions
    ADD COLUMN profile text NOT NULL DEFAULT 'standard'
        CONSTRAINT ck_scan_executions_profile CHECK (profile IN ('quick', 'standard', 'deep'));
"""

DOWNGRADE = """
ALTER TABLE scan_executions DROP COLUMN IF EXISTS profile;
ALTER TABLE scan_tasks DROP COLUMN IF EXISTS profile;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
