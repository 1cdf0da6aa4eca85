"""Alert rules on conditions: a scanner offline, a certificate about to expire (issue 34).

Revision ID: 20261202_0960
Revises: 20261202_0950
Create Date: 2026-12-02

Owned by ``app/alerts``:

* ``alert_rules.days``: for ``certificate_expires``, how many days before a
  certificate's ``not_after`` the rule fires; ``alert_rules.back_online``: a
  ``scanner_offline`` rule also says when the scanner is back.
* ``alert_condition_marks``: one row per rule and condition episode a message was made
  for (a scanner that went offline after a given last sign of life; a certificate
  fingerprint that crossed a rule's threshold). The periodic condition job inserts the
  mark and the messages in one transaction, so each episode is told once per rule and
  channel whatever the number of runners or restarts; ``closed_at`` records that an
  offline scanner came back.
"""

from __future__ import annotations

from alembic import op

revision = "20261202_0960"
down_revision = "20261202_0950"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE alert_rules
    ADD COLUMN days integer CONSTRAINT ck_alert_rules_days CHECK (days BETWEEN 1 AND 3650),
    ADD COLUMN back_online boolean NOT NULL DEFAULT false;
CREATE INDEX ix_alert_rules_conditions ON alert_rules (id)
    WHERE enabled AND on_kinds && ARRAY['scanner_offline', 'certificate_expires']::text[];

CREATE TABLE alert_condition_marks (
    rule_id    bigint      NOT NULL REFERENCES alert_rules (id) ON DELETE CASCADE,
    kind       text        NOT NULL
                           CHECK (kind IN ('scanner_offline', 'certificate_expires')),
    subject    text        NOT NULL,
    episode    text        NOT NULL,
    opened_at  timestamptz NOT NULL DEFAULT now(),
    closed_at  timestamptz,
    PRIMARY KEY (rule_id, kind, subject, episode)
);
CREATE INDEX ix_alert_condition_marks_open ON alert_condition_marks (kind, subject)
    WHERE closed_at IS NULL;
"""

DOWNGRADE = """
DROP TABLE IF EXISTS alert_condition_marks;
DROP INDEX IF EXISTS ix_alert_rules_conditions;
ALTER TABLE alert_rules DROP COLUMN IF EXISTS back_online, DROP COLUMN IF EXISTS days;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
