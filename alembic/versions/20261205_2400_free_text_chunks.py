"""Free-text lookups of a value of nine or more characters read five-character chunks.

Revision ID: 20261205_2400
Revises: 20261205_2300
Create Date: 2026-12-05

A free-text search (``q``: banner, product and host name) first finds the distinct texts
that contain the value (``search_asset_texts``, migration 0170) through the trigram
index of the folded text (migration 1900). A host name's trigrams are each held by a
share of all texts (``q7q`` and ``77q`` of ``host-7-77-7``), so GIN steps through lists
that grow with the number of texts, and in an estate whose hosts have names every
endpoint brings a text of its own: a rare host name read 860 index pages among 500,000
such texts and 8,244 among five million (11.7 → 91.6 ms), linear in the estate.

The text fact values' remedy (migration 2300: every five-character substring of each
value in a GIN index) costs a free text as many index entries as it has characters, and
the projection pays them for every new text: +78 % database CPU on a first publish where
each endpoint brings a new text (``bench projection --hostnames``). This migration
indexes a fifth of them: ``netmap_text_chunks(text)`` cuts the folded text
(``netmap_text_fold``) into consecutive five-character chunks from its start, the
shorter tail left out (``hostq``, ``7q77q``, ``7qcor``… of ``host-7-77-7.corp``).

Where a text holds the folded value, the value starts at one of five alignments to those
chunks, and at that alignment every whole chunk of the value, cut from that offset, is a
chunk of the text. A value of nine or more characters has a whole chunk at each of the
five offsets, so the texts that hold it are among those whose chunks include all of the
value's chunks cut from offset 0, or all cut from offset 1, … or from offset 4: five
lookups of the same index, ORed, and the ``ILIKE`` decides exactly. A shorter value keeps
the trigram index. ``app.search.postgres_grams`` leaves out of each lookup the chunks
nearly every text holds, by the statistics ``ANALYZE`` keeps of this expression.

The function is plain SQL over catalogue functions only (``ANALYZE``, ``VACUUM`` and
``REINDEX`` evaluate index expressions with ``search_path`` set to ``pg_catalog`` from
PostgreSQL 17 on), inlined by the planner. The folded text holds no comma (every
character that is not a letter or digit is ``q``), so a comma after each chunk splits
them; the comma appended last and the tail are the two elements trimmed.

``CREATE INDEX`` holds off writes to the texts table while it builds (the projection's
merges wait; searches go on). ``ANALYZE`` runs only when the table holds texts
(migration 2300 says why not on an empty one); until then a lookup asks for every chunk.
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op

revision = "20261205_2400"
down_revision = "20261205_2300"
branch_labels = None
depends_on = None

TABLE, INDEX = "search_asset_texts", "ix_search_asset_texts_chunks"

FUNCTION = r"""
CREATE FUNCTION netmap_text_chunks(value text) RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
SELECT pg_catalog.trim_array(pg_catalog.string_to_array(pg_catalog.regexp_replace(
           pg_catalog.regexp_replace(pg_catalog.lower(value), '[^[:alnum:]]', 'q', 'g'),
           '(.{5})', '\1,', 'g') || ',', ','), 2)
$$;
"""


def upgrade() -> None:
    op.execute(FUNCTION)
    op.execute(f"CREATE INDEX {INDEX} ON {TABLE} USING gin (netmap_text_chunks(text))")
    exists = f"SELECT EXISTS (SELECT FROM {TABLE})"  # noqa: S608 - a module constant
    if op.get_bind().execute(sa.text(exists)).scalar():
        op.execute(f"ANALYZE {TABLE}")


def downgrade() -> None:
    op.execute(f"DROP INDEX {INDEX}")
    op.execute("DROP FUNCTION netmap_text_chunks(text)")
