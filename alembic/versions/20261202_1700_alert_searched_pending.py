"""Search-filtered alert rules wait for the search store after the analysis commits.

Revision ID: 20261202_1700
Revises: 20261202_1620
Create Date: 2026-12-02

Owned by ``app/alerts``:

* ``alert_searched_pending``: one row per execution whose change set still has to be
  compared with the owner's search-filtered rules by a search store that cannot test
  assets inside the analysis's statement (Elasticsearch). Written in the analysis's
  transaction, deleted in the transaction that creates those rules' messages, so a crash
  in between leaves the row for the ``alert-searched-changes`` job. While a run has a
  row here its digests wait (``run_id`` index). Executions and runs removed by a task
  purge take their rows with them.
"""

from __future__ import annotations

from alembic import op

revision = "20261202_1700"
down_revision = "20261202_1620"
branch_labels = None
depends_on = None

UPGRADE = """
CREATE TABLE alert_searched_pending (
    execution_id bigint      PRIMARY KEY REFERENCES scan_executions (id) ON DELETE CASCADE,
    run_id       bigint      NOT NULL REFERENCES task_runs (id) ON DELETE CASCADE,
    owner_id     bigint      NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ix_alert_searched_pending_run ON alert_searched_pending (run_id);
"""

DOWNGRADE = "DROP TABLE alert_searched_pending;"


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
