"""Scanner fleet: what each scanner's agent reports about itself (issue 33).

Revision ID: 20261202_0950
Revises: 20261202_0810
Create Date: 2026-12-02

Owned by ``app/identity`` (``scanners``): the agent sends its version, host name and
scan engines with their versions on every claim and lease renewal; the server keeps
the last values it was told (written only when they differ, so an idle agent's polls
cost no row write). ``last_seen_at`` (already there) is the sign of life.

The partial index on ``scan_executions`` (owned by ``app/scan_control``) finds a
scanner's last finished execution for the fleet list's observation rate without
reading the scanner's whole history.
"""

from __future__ import annotations

from alembic import op

revision = "20261202_0950"
down_revision = "20261202_0810"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE scanners
    ADD COLUMN agent_version text CONSTRAINT ck_scanners_agent_version
        CHECK (length(agent_version) <= 64),
    ADD COLUMN hostname text CONSTRAINT ck_scanners_hostname CHECK (length(hostname) <= 255),
    ADD COLUMN engines jsonb NOT NULL DEFAULT '{}'::jsonb;
CREATE INDEX ix_scan_executions_scanner_finished ON scan_executions (scanner_id, finished_at DESC)
    WHERE status = 'succeeded';
"""

DOWNGRADE = """
DROP INDEX IF EXISTS ix_scan_executions_scanner_finished;
ALTER TABLE scanners
    DROP COLUMN IF EXISTS engines,
    DROP COLUMN IF EXISTS hostname,
    DROP COLUMN IF EXISTS agent_version;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
