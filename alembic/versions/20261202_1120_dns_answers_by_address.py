"""The DNS answers of an address (issue 37: DNS names on the host page).

Revision ID: 20261202_1120
Revises: 20261202_1110
Create Date: 2026-12-02

The host view lists the names an owner's DNS executions resolved to the address. The
answers' primary key starts with the execution; this partial index finds an address's
A and AAAA answers directly.
"""

from __future__ import annotations

from alembic import op

revision = "20261202_1120"
down_revision = "20261202_1110"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "CREATE INDEX ix_scan_dns_answers_address ON scan_dns_answers (value) "
        "WHERE type IN ('A', 'AAAA')"
    )


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_scan_dns_answers_address")
