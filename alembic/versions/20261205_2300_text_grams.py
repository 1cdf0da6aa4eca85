"""Text fact lookups of a value of five or more characters read five-character grams.

Revision ID: 20261205_2300
Revises: 20261204_2200
Create Date: 2026-12-05

A text fact clause (``cert.issuer:``, ``cert.subject:``, ``title:``, ``server:``) first
finds the distinct values that contain the searched value (``search_asset_fact_texts``).
Since migration 1900 that is the folded value inside the folded text, through a trigram
index. A trigram is three characters: each of ``10q0q77q7``'s (``10q``, ``q0q``,
``q77``…) is held by one address-like text in a hundred or more, so each is a long
posting list, and GIN steps through the lists of all of them to intersect them. The texts that hold all of them are the same
eleven at every size, but the lists grow with the number of distinct texts: at two
million certificate subjects the lookup read about 800 index pages for those eleven.

Five characters are far more particular: the rarest of the value's five-character grams
(``q77q7``) is held by a few hundred subjects at two million, not tens of thousands.
``netmap_text_grams(text)`` is the folded text's five-character substrings (none for a
shorter text), and the distinct values table gets a GIN index over it. A search for a
value of five or more characters asks for the texts whose grams include all of the
value's (through this index) *and* for the value inside the text (``ILIKE``, the exact
condition): a text that contains the value has a folded form that contains the folded
value (the fold maps character by character), so it has all of the value's grams; the
grams can only admit extra candidates, which the exact condition drops. A shorter value
has no grams and keeps the trigram index. The answers are unchanged
(``tests/integration/search/test_text_grams.py``).

Only the text fact values get grams. The free-text texts (``search_asset_texts``: banner,
product and host name together) are often hundreds of characters, and a text has as
many grams as characters: computing and indexing them for every new banner would cost
the projection far more than the trigrams' C code does. Free text keeps its trigrams.

The function folds the text itself (the very expression of ``netmap_text_fold``) rather
than call it: from PostgreSQL 17 on, ``ANALYZE``, ``VACUUM`` and ``REINDEX`` evaluate
index expressions with ``search_path`` set to ``pg_catalog``, where a call to a function
of the public schema by its bare name would not be found. It lists a gram as often as
the text holds it: GIN keeps each key once per row. It walks the folded text's
characters once, keeping the last five: ``substr(folded, i, 5)`` for each ``i`` counts
its way from the start of the text for every gram (a UTF-8 text has no fixed character
width), which made a 1,000-character title cost 2 ms instead of a quarter of one. It is
PL/pgSQL, whose plans last the session: a plain SQL function would be planned again by
every statement that inserts a value (the numbering triggers insert them one by one).
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op

revision = "20261205_2300"
down_revision = "20261204_2200"
branch_labels = None
depends_on = None

TABLE, INDEX = "search_asset_fact_texts", "ix_search_asset_fact_texts_grams"

FUNCTION = r"""
CREATE FUNCTION netmap_text_grams(value text) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    last_five text := '';
    letter text;
    grams text[] := '{}';
BEGIN
    FOREACH letter IN ARRAY
        regexp_split_to_array(regexp_replace(lower(value), '[^[:alnum:]]', 'q', 'g'), '')
    LOOP
        last_five := right(last_five || letter, 5);
        IF length(last_five) = 5 THEN
            grams := grams || last_five;
        END IF;
    END LOOP;
    RETURN grams;
END
$$;
"""


def upgrade() -> None:
    op.execute(FUNCTION)
    op.execute(f"CREATE INDEX {INDEX} ON {TABLE} USING gin (netmap_text_grams(text))")
    # Statistics of the new index expression (its grams' frequencies), for the planner;
    # only of values there are. On an empty table (a new installation) ANALYZE would
    # record "analysed, no rows", and until autovacuum's next look every plan cached
    # meanwhile (the numbering triggers' lookup of a value by its key among them) would
    # read the table whole for each row it numbers.
    exists = f"SELECT EXISTS (SELECT FROM {TABLE})"  # noqa: S608 - a module constant
    if op.get_bind().execute(sa.text(exists)).scalar():
        op.execute(f"ANALYZE {TABLE}")


def downgrade() -> None:
    op.execute(f"DROP INDEX {INDEX}")
    op.execute("DROP FUNCTION netmap_text_grams(text)")
