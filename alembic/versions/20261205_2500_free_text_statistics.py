"""Statistics on the asset views' free text, so a search can tell a common one.

Revision ID: 20261205_2500
Revises: 20261205_2400
Create Date: 2026-12-05

A free text is tested against the distinct texts (``search_asset_texts``) by each view
row's text key. For a text a large share of the rows hold (``tomcat``: a fifth), a page
walks the view in its order and probed the texts table once per row walked; those
probes land on random pages and grew with the estate (2.97 ms a page at a million named
assets, 7.35 ms at ten million). Testing the row's own text (``banner``, ``product`` and
``hostname`` joined, exactly the value the key is the md5 of) answers the same without
a probe, but only pays where the text is common: a rare one must still be started from
the texts' indexes. Extended statistics on the very expression give its most common
values and a histogram, from which ``app.search.postgres_text_share`` estimates the
share of rows holding a text, as the planner estimates an ``ILIKE``, and picks.

The expression is ``app.search.postgres_schema.TEXT_EXPRESSION``, spelled here without
a table alias (the statistics and the search's own test must name the same expression
for the planner to use them). ``ANALYZE`` runs only where a view holds rows; until then a
search looks the texts up as before.
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op

revision = "20261205_2500"
down_revision = "20261205_2400"
branch_labels = None
depends_on = None

TABLES = ("search_assets_user", "search_assets_global")
TEXT_EXPRESSION = (
    "(coalesce(banner, '') || E'\\x1f' || coalesce(product, '') || E'\\x1f' "
    "|| coalesce(hostname, ''))"
)


def upgrade() -> None:
    bind = op.get_bind()
    for table in TABLES:
        op.execute(f"CREATE STATISTICS st_{table}_text ON {TEXT_EXPRESSION} FROM {table}")
        exists = f"SELECT EXISTS (SELECT FROM {table})"  # noqa: S608 - a module constant
        if bind.execute(sa.text(exists)).scalar():
            op.execute(f"ANALYZE {table}")


def downgrade() -> None:
    for table in TABLES:
        op.execute(f"DROP STATISTICS IF EXISTS st_{table}_text")
