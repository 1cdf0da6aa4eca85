"""The change feed reads one owner's changes, newest first, without visiting others'.

Revision ID: 20261207_3000
Revises: 20261207_2900
Create Date: 2026-12-07

Owned by ``app/analysis``:

* ``analysis_changes`` gets ``(owner_id, kind, id)``: ``GET /api/changes`` (and the
  console's Changes page) lists what changed across all of the caller's tasks, newest
  first, optionally one kind, in keyset pages. A kind is one backward range of it, all
  kinds the four ranges merged (``app.analysis.queries.owner_changes``), whatever the
  other owners' changes; the task indexes could only serve it by merging every task of
  the owner. One index rather than two (``(owner_id, id)`` as well): a first scan writes
  a change for every endpoint, and each index entry costs it. ``CREATE INDEX`` holds off
  the analysis's writes while it builds, as in migration 0140.
"""

from __future__ import annotations

from alembic import op

revision = "20261207_3000"
down_revision = "20261207_2900"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "CREATE INDEX ix_analysis_changes_owner_kind ON analysis_changes (owner_id, kind, id)"
    )


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_analysis_changes_owner_kind")
