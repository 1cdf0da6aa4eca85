"""Asset exports keep the asset search's parameters, so the console exports what a page lists.

Revision ID: 20261207_2800
Revises: 20261206_2700
Create Date: 2026-12-07

Owned by ``app/exports``:

* ``exports.asset_filters``: the ``GET /api/assets`` parameters an asset export was asked
  with (``port``, ``cidr``, ``status``, ``q``, ``sort``…; each a text, as a query string
  carries it), beside its search-language ``query`` (empty when only filters were
  given). The runner builds the export's query from both with the function the Assets
  page uses (``app.search.asset_params``), so the file holds the rows the page listed.
  NULL for a task's export and for an export asked with a query alone.
"""

from __future__ import annotations

from alembic import op

revision = "20261207_2800"
down_revision = "20261206_2700"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE exports
    ADD COLUMN asset_filters jsonb,
    ADD CONSTRAINT ck_exports_asset_filters CHECK (
        asset_filters IS NULL
        OR (task_id IS NULL AND jsonb_typeof(asset_filters) = 'object')
    );
"""

DOWNGRADE = """
ALTER TABLE exports
    DROP CONSTRAINT IF EXISTS ck_exports_asset_filters,
    DROP COLUMN IF EXISTS asset_filters;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
