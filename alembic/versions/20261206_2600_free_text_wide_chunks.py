"""Free-text lookups of a value of fourteen or more characters read ten-character chunks.

Revision ID: 20261206_2600
Revises: 20261205_2500
Create Date: 2026-12-06

Migration 2400 looks a free text of nine or more characters up through five-character
chunks of the distinct texts. Five characters of a host name are still shared widely in
an estate whose hosts are named after their addresses: ``0q77q`` of
``host-10-0-77-7.corp`` is a chunk of every text whose address holds ``0.77.`` at that
alignment, and their number grows with the estate, so a rare host name's lookup read
more index pages the more texts there were (docs/performance.md, "Rare host names").

Ten characters are particular to one host. ``netmap_text_wide_chunks(text)`` cuts the
folded text (``netmap_text_fold``) into ten-character chunks from its start and again
from its sixth character, so a chunk starts at every fifth character and two
neighbouring chunks overlap by five (``hostq10q0q``, ``q0q77q7qco``… and ``10q0q77q7q``…
of ``host-10-0-77-7.corp``); the shorter tails are left out. Where a text holds the
folded value, the value starts at one of five alignments to those starts, and at that
alignment every whole ten-character piece of the value cut at every fifth character
from that offset is a chunk of the text. A value of fourteen or more characters has such
a piece at each of the five offsets (four characters before the first one at the last),
so its texts are among those found by five lookups of this index, ORed; the ``ILIKE``
decides exactly, as for the five-character chunks, which shorter values keep.

Each text costs about twice as many index entries as its five-character chunks (a chunk
starts every five characters, each twice as long), so this index is the larger of the
two; what it costs and what it saves are in docs/performance.md, "Rare host names".

As in migration 2400, the function is plain SQL over catalogue functions only, inlined
by the planner, and the folded text holds no comma to split on. ``CREATE INDEX`` holds off
writes to the texts table while it builds; ``ANALYZE`` runs only when the table holds
texts, so ``app.search.postgres_grams`` can leave out the chunks nearly every text holds.
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op

revision = "20261206_2600"
down_revision = "20261205_2500"
branch_labels = None
depends_on = None

TABLE, INDEX = "search_asset_texts", "ix_search_asset_texts_wide_chunks"

# Two splits of the same folded text: from its first character and from its sixth.
_FOLDED = r"pg_catalog.regexp_replace(pg_catalog.lower(value), '[^[:alnum:]]', 'q', 'g')"
_SPLIT = (
    r"pg_catalog.trim_array(pg_catalog.string_to_array(pg_catalog.regexp_replace("
    r"{text}, '(.{{10}})', '\1,', 'g') || ',', ','), 2)"
)
FUNCTION = f"""
CREATE FUNCTION netmap_text_wide_chunks(value text) RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
SELECT pg_catalog.array_cat({_SPLIT.format(text=_FOLDED)},
                            {_SPLIT.format(text=f"pg_catalog.substr({_FOLDED}, 6)")})
$$;
"""


def upgrade() -> None:
    op.execute(FUNCTION)
    op.execute(f"CREATE INDEX {INDEX} ON {TABLE} USING gin (netmap_text_wide_chunks(text))")
    exists = f"SELECT EXISTS (SELECT FROM {TABLE})"  # noqa: S608 - a module constant
    if op.get_bind().execute(sa.text(exists)).scalar():
        op.execute(f"ANALYZE {TABLE}")


def downgrade() -> None:
    op.execute(f"DROP INDEX {INDEX}")
    op.execute("DROP FUNCTION netmap_text_wide_chunks(text)")
