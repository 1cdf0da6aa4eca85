"""A field a scan did not probe is not a change (docs/changes.md).

Revision ID: 20261202_0800
Revises: 20261202_0700
Create Date: 2026-12-02

* Endpoint documents (execution endpoints and both asset views) gain ``observed``:
  when each probed field's value (service, product, version, banner, hostname) was
  last observed, where that is not the row's ``last_seen`` (a merge kept the value of
  an older observation because the newer one did not probe the field). Null for a row
  whose values are all as new as the row.
* The change analysis records the hostname too (``analysis_assets``,
  ``analysis_sightings``, old/new in ``analysis_changes``).
* ``analysis_changes`` gets an index on ``(execution_id, id)``: a change set is read
  whole by the alert rules' evaluation (``app.alerts.evaluate``), in the analysis's
  transaction; the existing execution index only covers gone/reappeared rows.
  ``CREATE INDEX`` holds off writes to the table while it builds (as migration 0140).

Every new column is nullable without a default, so adding it rewrites no table.
"""

from alembic import op

revision = "20261202_0800"
down_revision = "20261202_0700"
branch_labels = None
depends_on = None

UPGRADE = r"""
ALTER TABLE search_execution_endpoints ADD COLUMN observed jsonb;
ALTER TABLE search_assets_global ADD COLUMN observed jsonb;
ALTER TABLE search_assets_user ADD COLUMN observed jsonb;
ALTER TABLE analysis_assets ADD COLUMN hostname text;
ALTER TABLE analysis_sightings ADD COLUMN hostname text;
ALTER TABLE analysis_changes ADD COLUMN old_hostname text, ADD COLUMN new_hostname text;
CREATE INDEX ix_analysis_changes_change_set ON analysis_changes (execution_id, id);
"""

DOWNGRADE = r"""
DROP INDEX ix_analysis_changes_change_set;
ALTER TABLE analysis_changes DROP COLUMN old_hostname, DROP COLUMN new_hostname;
ALTER TABLE analysis_sightings DROP COLUMN hostname;
ALTER TABLE analysis_assets DROP COLUMN hostname;
ALTER TABLE search_assets_user DROP COLUMN observed;
ALTER TABLE search_assets_global DROP COLUMN observed;
ALTER TABLE search_execution_endpoints DROP COLUMN observed;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
