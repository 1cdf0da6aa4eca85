"""Text fact lookups of a value of eight or more characters read eight-character grams.

Revision ID: 20261206_2700
Revises: 20261206_2600
Create Date: 2026-12-06

Migration 2300 finds a text fact value (``cert.subject:``, ``title:``…) of five or more
characters through the five-character grams of the distinct values. Five characters of
an address are still shared by more values the larger the estate: ``q77q7`` of
``10.0.77.7`` is a gram of every value whose address holds ``.77.7``, and ``10q0q`` of
every one in ``10.0.0.0/16`` (a share that falls under the common-piece limit as the
table grows, so the lookup starts asking for its long list). Among 400,000 address-like
values the lookup of ``10.0.77.7`` read 15 index pages, among four million 23, and
``host 10.0.77.7`` 15 and 32 (docs/inventory.md, "Eight characters for a longer value").

Eight characters are particular to one address or name: ``10q0q77q`` is a gram of the
values in ``10.0.77.0/24`` alone, whatever the estate. ``netmap_text_wide_grams(text)``
is the folded text's eight-character substrings (none for a shorter text), in a second
GIN index on the distinct values. A value of eight or more characters asks for its
eight-character grams (through this index) and for the value inside the text
(``ILIKE``, the exact condition): a value that contains the searched value has all of
its grams, as the fold maps character by character. Five to seven characters keep the
five-character grams, shorter values the trigrams.

The function is migration 2300's with a window of eight, for the same reasons: it folds
the text itself (from PostgreSQL 17 on, ``ANALYZE`` and ``REINDEX`` evaluate index
expressions with only ``pg_catalog`` on the path), walks the characters once, and is
PL/pgSQL, planned once per session. ``CREATE INDEX`` holds off writes of new values
while it builds; ``ANALYZE`` runs only when the table holds values, as in migration 2300.
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op

revision = "20261206_2700"
down_revision = "20261206_2600"
branch_labels = None
depends_on = None

TABLE, INDEX = "search_asset_fact_texts", "ix_search_asset_fact_texts_wide_grams"

FUNCTION = r"""
CREATE FUNCTION netmap_text_wide_grams(value text) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    last_eight text := '';
    letter text;
    grams text[] := '{}';
BEGIN
    FOREACH letter IN ARRAY
        regexp_split_to_array(regexp_replace(lower(value), '[^[:alnum:]]', 'q', 'g'), '')
    LOOP
        last_eight := right(last_eight || letter, 8);
        IF length(last_eight) = 8 THEN
            grams := grams || last_eight;
        END IF;
    END LOOP;
    RETURN grams;
END
$$;
"""


def upgrade() -> None:
    op.execute(FUNCTION)
    op.execute(f"CREATE INDEX {INDEX} ON {TABLE} USING gin (netmap_text_wide_grams(text))")
    exists = f"SELECT EXISTS (SELECT FROM {TABLE})"  # noqa: S608 - a module constant
    if op.get_bind().execute(sa.text(exists)).scalar():
        op.execute(f"ANALYZE {TABLE}")


def downgrade() -> None:
    op.execute(f"DROP INDEX {INDEX}")
    op.execute("DROP FUNCTION netmap_text_wide_grams(text)")
