"""Statistics on the search language's text facts (issue 37).

Revision ID: 20261202_1100
Revises: 20261202_0960
Create Date: 2026-12-02

``title:``, ``server:``, ``cert.subject:`` and ``cert.issuer:`` are substring searches of
one value inside ``details`` (``app.search.endpoint_facts``). With no statistics on the
expression the planner guessed a handful of matches, so a common value (an issuer on a
fifth of the assets) was read in full and sorted: 117 ms at 100,000 assets. Extended
statistics on the very expression the search spells give it the real frequency, and a
common value is read in page order and stops after one page (about 1 ms).

A trigram index on each expression would also make a rare value an index lookup, but
it was measured to cost 75 % more database CPU per published endpoint on a fleet where
every endpoint carries TLS and HTTP facts (25 % for the issuer alone), so it is not
built; docs/inventory.md gives the figures.
"""

from __future__ import annotations

from alembic import op

revision = "20261202_1100"
down_revision = "20261202_0960"
branch_labels = None
depends_on = None

# (statistics suffix, details section, key): the "text" facts of endpoint_facts.FACT_FIELDS.
TEXT_FACTS = (
    ("http_title", "http", "title"),
    ("http_server", "http", "server"),
    ("tls_subject", "tls", "subject_cn"),
    ("tls_issuer", "tls", "issuer"),
)
TABLES = ("search_assets_user", "search_assets_global")


def _expression(section: str, key: str) -> str:
    # Exactly endpoint_facts._fact_sql(section, key, "text") without the table alias.
    text = f"(details->'{section}'->>'{key}')"
    return (
        f"(CASE WHEN jsonb_typeof(details->'{section}'->'{key}') = 'string' "
        f"AND length({text}) <= 1024 THEN {text} END)"
    )


def upgrade() -> None:
    for table in TABLES:
        for suffix, section, key in TEXT_FACTS:
            op.execute(
                f"CREATE STATISTICS st_{table}_{suffix} ON {_expression(section, key)} FROM {table}"
            )


def downgrade() -> None:
    for table in TABLES:
        for suffix, _, _ in TEXT_FACTS:
            op.execute(f"DROP STATISTICS IF EXISTS st_{table}_{suffix}")
