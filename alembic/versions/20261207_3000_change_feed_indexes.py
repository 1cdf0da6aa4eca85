"""The change feed reads one owner's changes, newest first, without visiting others'.

Revision ID: 20261207_3000
Revises: 20261207_2900
Create Date: 2026-12-07

Owned by ``app/analysis``:

* ``analysis_changes`` gets ``(owner_id, id)`` and ``(owner_id, kind, id)``: ``GET
  /api/changes`` (and the console's Changes page) lists what changed across all of the
  caller's tasks, newest first, optionally one kind, in keyset pages. With these, a
  page is one backward range of an index whatever the other owners' changes; the task
  indexes could only serve it by merging every task of the owner. ``CREATE INDEX`` holds
  off the analysis's writes while it builds, as in migration 0140.
"""

from __future__ import annotations

from alembic import op

revision = "20261207_3000"
down_revision = "20261207_2900"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE INDEX ix_analysis_changes_owner ON analysis_changes (owner_id, id)")
    op.execute(
        "CREATE INDEX ix_analysis_changes_owner_kind ON analysis_changes (owner_id, kind, id)"
    )


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_analysis_changes_owner_kind")
    op.execute("DROP INDEX IF EXISTS ix_analysis_changes_owner")
