"""Saved searches (or a query of their own) as alert-rule filters and report scopes.

Revision ID: 20261202_1600
Revises: 20261202_1500
Create Date: 2026-12-02

``alert_rules`` and ``report_definitions`` each get ``search_id`` (one of the owner's
saved searches, read when the rule is evaluated or the report captured, so an edit of
the search applies) or ``query`` (the rule's or definition's own search-language text),
never both. A saved search in use cannot be deleted: the reference is a plain foreign
key (``NO ACTION``), so the delete fails and the API answers 409 ``in_use``; deleting
the user still cascades through both, since the check runs at the statement's end.
"""

from __future__ import annotations

from alembic import op

revision = "20261202_1600"
down_revision = "20261202_1500"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE alert_rules
    ADD COLUMN search_id bigint
        CONSTRAINT fk_alert_rules_search REFERENCES saved_searches (id),
    ADD COLUMN query text CHECK (length(query) <= 1000),
    ADD CONSTRAINT ck_alert_rules_one_query CHECK (search_id IS NULL OR query IS NULL);
CREATE INDEX ix_alert_rules_search ON alert_rules (search_id) WHERE search_id IS NOT NULL;

ALTER TABLE report_definitions
    ADD COLUMN search_id bigint
        CONSTRAINT fk_report_definitions_search REFERENCES saved_searches (id),
    ADD COLUMN query text CHECK (length(query) <= 1000),
    ADD CONSTRAINT ck_report_definitions_one_query CHECK (search_id IS NULL OR query IS NULL);
CREATE INDEX ix_report_definitions_search ON report_definitions (search_id)
    WHERE search_id IS NOT NULL;
"""

DOWNGRADE = """
ALTER TABLE report_definitions DROP COLUMN IF EXISTS search_id, DROP COLUMN IF EXISTS query;
ALTER TABLE alert_rules DROP COLUMN IF EXISTS search_id, DROP COLUMN IF EXISTS query;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
