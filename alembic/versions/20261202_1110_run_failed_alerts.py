"""Alert rules on failed runs (issue 34: ``run_failed``).

Revision ID: 20261202_1110
Revises: 20261202_1100
Create Date: 2026-12-02

A run that ends ``failed`` or ``partial`` is a condition episode like a scanner going
offline: ``alert_condition_marks`` takes the kind ``run_failed`` (subject: the run), the
condition rules' partial index covers it, and a partial index on the runs that ended
badly lets the periodic evaluation read only those of the last day.
"""

from __future__ import annotations

from alembic import op

revision = "20261202_1110"
down_revision = "20261202_1100"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE alert_condition_marks DROP CONSTRAINT alert_condition_marks_kind_check;
ALTER TABLE alert_condition_marks ADD CONSTRAINT alert_condition_marks_kind_check
    CHECK (kind IN ('scanner_offline', 'certificate_expires', 'run_failed'));
DROP INDEX ix_alert_rules_conditions;
CREATE INDEX ix_alert_rules_conditions ON alert_rules (id)
    WHERE enabled
      AND on_kinds && ARRAY['scanner_offline', 'certificate_expires', 'run_failed']::text[];
CREATE INDEX ix_task_runs_ended_badly ON task_runs (finished_at)
    WHERE status IN ('failed', 'partial');
"""

DOWNGRADE = """
DROP INDEX IF EXISTS ix_task_runs_ended_badly;
DROP INDEX ix_alert_rules_conditions;
CREATE INDEX ix_alert_rules_conditions ON alert_rules (id)
    WHERE enabled AND on_kinds && ARRAY['scanner_offline', 'certificate_expires']::text[];
DELETE FROM alert_condition_marks WHERE kind = 'run_failed';
ALTER TABLE alert_condition_marks DROP CONSTRAINT alert_condition_marks_kind_check;
ALTER TABLE alert_condition_marks ADD CONSTRAINT alert_condition_marks_kind_check
    CHECK (kind IN ('scanner_offline', 'certificate_expires'));
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
