"""Alert digests per run (issue 34: one digest per run and channel; the ``each`` cap per run).

Revision ID: 20261202_1500
Revises: 20261202_1400
Create Date: 2026-12-02

Owned by ``app/alerts``:

* ``alert_run_digests``: one row per rule and run, accumulated by every change set of the
  run in the analysis's transaction: how many single messages the rule has sent in the
  run (its ``each`` cap), what the run's digest will carry (count per kind, the first
  changes) and, once the digest's messages exist, ``emitted_at``. The partial index finds
  the digests still to send.
* ``alert_deliveries.run_id``: the run a digest (or a single message) belongs to. The
  partial unique index makes a second digest of the same rule, run and channel
  impossible, whoever tries to create it.
"""

from __future__ import annotations

from alembic import op

revision = "20261202_1500"
down_revision = "20261202_1400"
branch_labels = None
depends_on = None

UPGRADE = """
CREATE TABLE alert_run_digests (
    rule_id      bigint      NOT NULL REFERENCES alert_rules (id) ON DELETE CASCADE,
    run_id       bigint      NOT NULL REFERENCES task_runs (id) ON DELETE CASCADE,
    owner_id     bigint      NOT NULL,
    task_id      bigint      NOT NULL,
    folded       boolean     NOT NULL,
    singles_sent integer     NOT NULL DEFAULT 0,
    total        integer     NOT NULL DEFAULT 0,
    new          integer     NOT NULL DEFAULT 0,
    changed      integer     NOT NULL DEFAULT 0,
    gone         integer     NOT NULL DEFAULT 0,
    reappeared   integer     NOT NULL DEFAULT 0,
    changes      jsonb       NOT NULL DEFAULT '[]',
    executions   integer     NOT NULL DEFAULT 0,
    emitted_at   timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (rule_id, run_id)
);
CREATE INDEX ix_alert_run_digests_due ON alert_run_digests (run_id) WHERE emitted_at IS NULL;

ALTER TABLE alert_deliveries ADD COLUMN run_id bigint;
CREATE UNIQUE INDEX uq_alert_deliveries_run_digest ON alert_deliveries (rule_id, run_id, channel_id)
    WHERE message_kind = 'digest' AND run_id IS NOT NULL;
"""

DOWNGRADE = """
DROP INDEX uq_alert_deliveries_run_digest;
ALTER TABLE alert_deliveries DROP COLUMN run_id;
DROP TABLE alert_run_digests;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
