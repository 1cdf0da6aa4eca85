"""Executions of kind ``import``: result files fed through the upload pipeline (AGT-7).

Revision ID: 20261130_0110
Revises: 20261130_0100
Create Date: 2026-11-30

An imported nmap/masscan/naabu file becomes an execution of its task with
kind ``import``; it is created running (with a claim token and lease held by
the importing request) and never queued, so no scanner can claim it. The
only schema change is the kind's check constraint.
"""

from alembic import op

revision = "20261130_0110"
down_revision = "20261130_0100"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        ALTER TABLE scan_executions DROP CONSTRAINT IF EXISTS scan_executions_kind_check;
        ALTER TABLE scan_executions ADD CONSTRAINT scan_executions_kind_check
            CHECK (kind IN ('ports', 'dns', 'import'));
        """
    )


def downgrade() -> None:
    op.execute(
        """
        DELETE FROM scan_executions WHERE kind = 'import';
        ALTER TABLE scan_executions DROP CONSTRAINT IF EXISTS scan_executions_kind_check;
        ALTER TABLE scan_executions ADD CONSTRAINT scan_executions_kind_check
            CHECK (kind IN ('ports', 'dns'));
        """
    )
