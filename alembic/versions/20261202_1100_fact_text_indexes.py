"""Trigram indexes for the search language's text facts (issue 37).

Revision ID: 20261202_1100
Revises: 20261202_0960
Create Date: 2026-12-02

``title:``, ``server:``, ``cert.subject:`` and ``cert.issuer:`` are substring searches of
one value inside ``details`` (``app.search.endpoint_facts``). Without an index each was a
scan of the whole view, and the planner, with no statistics on the expression, guessed a
handful of matches: a common issuer (a fifth of the assets) was read in full and sorted.
A GIN trigram index on the very expression the search spells gives a plan for rare
values, and extended statistics on the same expression and on the section test give
the estimate that lets a common value be read in page order and stop after one page. The indexes are
partial (only rows whose ``details`` hold the section as an object), so assets without
HTTP or TLS facts cost nothing to write; the search adds the same condition.
"""

from __future__ import annotations

from alembic import op

revision = "20261202_1100"
down_revision = "20261202_0960"
branch_labels = None
depends_on = None

# (index suffix, details section, key): the "text" facts of endpoint_facts.FACT_FIELDS.
TEXT_FACTS = (
    ("http_title", "http", "title"),
    ("http_server", "http", "server"),
    ("tls_subject", "tls", "subject_cn"),
    ("tls_issuer", "tls", "issuer"),
)


def _expression(section: str, key: str) -> str:
    # Exactly endpoint_facts._fact_sql(section, key, "text") without the table alias.
    text = f"(details->'{section}'->>'{key}')"
    return (
        f"(CASE WHEN jsonb_typeof(details->'{section}'->'{key}') = 'string' "
        f"AND length({text}) <= 1024 THEN {text} END)"
    )


SECTIONS = ("http", "tls")


def upgrade() -> None:
    for table in ("search_assets_user", "search_assets_global"):
        # Without these the partial indexes' condition is guessed at 0.5 % of the rows.
        for section in SECTIONS:
            op.execute(
                f"CREATE STATISTICS st_{table}_{section}_section "
                f"ON (jsonb_typeof(details->'{section}')) FROM {table}"
            )
        for suffix, section, key in TEXT_FACTS:
            op.execute(
                f"CREATE INDEX ix_{table}_{suffix}_trgm ON {table} "
                f"USING gin ({_expression(section, key)} gin_trgm_ops) "
                f"WHERE jsonb_typeof(details->'{section}') = 'object'"
            )
            # The planner ignores a partial index's expression statistics; these are
            # the whole table's, for the estimate of a common value.
            op.execute(
                f"CREATE STATISTICS st_{table}_{suffix} ON {_expression(section, key)} FROM {table}"
            )


def downgrade() -> None:
    for table in ("search_assets_user", "search_assets_global"):
        for section in SECTIONS:
            op.execute(f"DROP STATISTICS IF EXISTS st_{table}_{section}_section")
        for suffix, _, _ in TEXT_FACTS:
            op.execute(f"DROP STATISTICS IF EXISTS st_{table}_{suffix}")
            op.execute(f"DROP INDEX IF EXISTS ix_{table}_{suffix}_trgm")
