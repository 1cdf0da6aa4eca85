"""A small index of the upload receipts a final must look at across upload ids (ING-18).

Revision ID: 20261130_0065
Revises: 20261130_0060
Create Date: 2026-11-30

A final is refused while any batch of the execution is pending under another
upload id of the same claim, and no upload id may add batches once a final is
reserved. Those checks read the receipts that are pending or final for one
execution and claim; this partial index holds exactly those rows (a handful
per execution, not its whole history).
"""

from alembic import op

revision = "20261130_0065"
down_revision = "20261130_0060"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "CREATE INDEX ix_scan_upload_receipts_open "
        "ON scan_upload_receipts (execution_id, claim_token) "
        "WHERE status = 'pending' OR is_final"
    )


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_scan_upload_receipts_open")
