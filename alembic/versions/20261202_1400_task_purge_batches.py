"""A task purge counts the bounded batches it has confirmed (issue 33: purge progress).

Revision ID: 20261202_1400
Revises: 20261202_1130
Create Date: 2026-12-02

``task_purges.batches`` goes up by one with each checkpoint (one batch of assets, of
executions or of exports, saved under the purge's lease): with ``removed`` it shows how
far a purge has come and that it works in bounded steps.
"""

from __future__ import annotations

from alembic import op

revision = "20261202_1400"
down_revision = "20261202_1130"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE task_purges ADD COLUMN batches bigint NOT NULL DEFAULT 0")


def downgrade() -> None:
    op.execute("ALTER TABLE task_purges DROP COLUMN IF EXISTS batches")
