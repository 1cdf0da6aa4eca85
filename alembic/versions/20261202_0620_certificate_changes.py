"""The change analysis compares certificate fingerprints (issue 37).

Revision ID: 20261202_0620
Revises: 20261202_0610
Create Date: 2026-12-02

A new TLS certificate on an endpoint (another SHA-256 fingerprint) is a change, like a
new banner. ``analysis_assets`` records the fingerprint it last saw, changes keep old
and new, and the staging table of sightings (stores other than PostgreSQL) carries it.
A sighting without a certificate (a ``quick`` run probes none) leaves the recorded one
as it is: a field not probed is not a change.
"""

from __future__ import annotations

from alembic import op

revision = "20261202_0620"
down_revision = "20261202_0610"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE analysis_assets ADD COLUMN cert_sha256 text;
ALTER TABLE analysis_changes
    ADD COLUMN old_cert_sha256 text,
    ADD COLUMN new_cert_sha256 text;
ALTER TABLE analysis_sightings ADD COLUMN cert_sha256 text;
"""

DOWNGRADE = """
ALTER TABLE analysis_sightings DROP COLUMN IF EXISTS cert_sha256;
ALTER TABLE analysis_changes
    DROP COLUMN IF EXISTS new_cert_sha256,
    DROP COLUMN IF EXISTS old_cert_sha256;
ALTER TABLE analysis_assets DROP COLUMN IF EXISTS cert_sha256;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
