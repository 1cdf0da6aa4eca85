"""Projection outbox leases: claim token, lease, cursor, phase, progress (PRJ-1..6).

Revision ID: 20261130_0050
Revises: 20261130_0041
Create Date: 2026-11-30

Adds the leased-worker columns to ``scan_projection_outbox`` in place
(``ADD COLUMN``), so rows queued by the previous version stay and
become claimable as they are: no token, no lease, no cursor, phase ``pages``,
nothing processed. Re-running the revision changes nothing.

Upgrading (PRJ-10): stop every old instance first; the old and new queue
protocols must not run side by side (the old code knows no claim tokens or
checkpoints). Rolling the application back does not need this downgrade: the
old code ignores the new columns, which may stay. ``downgrade()`` exists for a
full schema rollback and drops only what this revision added.
"""

from alembic import op

revision = "20261130_0050"
down_revision = "20261130_0041"
branch_labels = None
depends_on = None

UPGRADE = r"""
ALTER TABLE scan_projection_outbox
    ADD COLUMN claim_token         uuid,
    ADD COLUMN lease_expires_at    timestamptz,
    ADD COLUMN cursor              text,
    ADD COLUMN phase               text        NOT NULL DEFAULT 'pages',
    ADD COLUMN processed_endpoints bigint      NOT NULL DEFAULT 0,
    ADD COLUMN updated_at          timestamptz NOT NULL DEFAULT now();

ALTER TABLE scan_projection_outbox
    DROP CONSTRAINT IF EXISTS ck_scan_projection_outbox_phase,
    ADD CONSTRAINT ck_scan_projection_outbox_phase
        CHECK (phase IN ('pages', 'refreshing', 'done')),
    DROP CONSTRAINT IF EXISTS ck_scan_projection_outbox_lease,
    ADD CONSTRAINT ck_scan_projection_outbox_lease
        CHECK ((claim_token IS NULL) = (lease_expires_at IS NULL)),
    DROP CONSTRAINT IF EXISTS ck_scan_projection_outbox_progress,
    ADD CONSTRAINT ck_scan_projection_outbox_progress
        CHECK (processed_endpoints >= 0 AND attempts >= 0);
"""

DOWNGRADE = r"""
ALTER TABLE scan_projection_outbox
    DROP CONSTRAINT IF EXISTS ck_scan_projection_outbox_progress,
    DROP CONSTRAINT IF EXISTS ck_scan_projection_outbox_lease,
    DROP CONSTRAINT IF EXISTS ck_scan_projection_outbox_phase,
    DROP COLUMN IF EXISTS updated_at,
    DROP COLUMN IF EXISTS processed_endpoints,
    DROP COLUMN IF EXISTS phase,
    DROP COLUMN IF EXISTS cursor,
    DROP COLUMN IF EXISTS lease_expires_at,
    DROP COLUMN IF EXISTS claim_token;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
