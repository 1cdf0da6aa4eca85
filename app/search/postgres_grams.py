"""Which five-character pieces of a searched value a distinct-text lookup asks for.

A value long enough finds its distinct texts through a GIN index of five-character
pieces of each folded text: every five-character substring for the text fact values
(``netmap_text_grams``, migration 2300), the consecutive five-character chunks for the
free texts (``netmap_text_chunks``, migration 2400; a value is then looked up at each of
the five alignments to the text's chunks, ORed). GIN intersects the posting lists of
every piece a lookup asks for, and a piece that nearly every text holds — ``hostq`` and
``qcorp`` of ``host-7-77-7.corp``, when every host is named ``host-….corp….`` — has a
list as long as the table: among five million such texts the two of them were three
quarters of the lookup's index pages, and their share grows with the table.

Any subset of the pieces finds every text that holds the value (each such text holds
all of them), and the lookup's ``ILIKE`` decides exactly, so a lookup may leave the
common pieces out. Which are common is what ``ANALYZE`` already records of the index's
expression: its most common elements and the share of texts holding each (``pg_stats``).
A piece held by more than ``COMMON_PIECE_SHARE`` of the texts is left out, unless every
piece of that lookup is that common (then all are asked for). With no statistics yet (a
new table, or a role that may not read them), every piece is asked for.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

# Pieces held by more than this share of the distinct texts are left out of a lookup. The
# rarest piece drives GIN's intersection; one held by a few percent of the texts only
# adds its list's pages.
COMMON_PIECE_SHARE = 0.01
# A free-text value this long has a whole chunk at each of the five alignments (four
# characters before the first chunk at the last one); a shorter one has none at some, and
# is looked up through the trigrams instead.
CHUNKED_LENGTH = 9

# Each lookup's pieces (``part``: the alignment for chunks; one part for grams), each with
# its share where the statistics list it (a piece below the most common ones has none).
# ``most_common_elems`` is an ``anyarray``, read as text[] through its text form.
_SHARES = """
    SELECT p.part, p.piece, s.share
      FROM ({pieces}) AS p
      LEFT JOIN (
            SELECT e.piece, e.share
              FROM pg_class c
              JOIN pg_namespace n ON n.oid = c.relnamespace
              JOIN pg_stats st ON st.schemaname = n.nspname AND st.tablename = c.relname
             CROSS JOIN unnest(CAST(CAST(st.most_common_elems AS text) AS text[]),
                               st.most_common_elem_freqs) AS e(piece, share)
             WHERE c.oid = to_regclass(:index)
           ) AS s ON s.piece = p.piece
     ORDER BY p.part, p.piece
"""
GRAM_SHARES = sa.text(
    _SHARES.format(
        pieces="SELECT DISTINCT 0 AS part, g AS piece FROM unnest(netmap_text_grams(:value)) AS g"
    )
)
# The value's chunks cut from each offset 0-4 of its folded form: where a text holds the
# value at alignment ``part``, these are chunks of the text.
CHUNK_SHARES = sa.text(
    _SHARES.format(
        pieces="SELECT DISTINCT a.part, c AS piece FROM generate_series(0, 4) AS a(part) "
        "CROSS JOIN unnest(netmap_text_chunks(substr(netmap_text_fold(:value), a.part + 1))) "
        "AS c"
    )
)


def _particular(rows) -> list[list[str]]:
    parts: dict[int, list[tuple[str, float | None]]] = {}
    for row in rows:
        parts.setdefault(row.part, []).append((row.piece, row.share))
    chosen = []
    for _part, pieces in sorted(parts.items()):
        kept = [p for p, share in pieces if share is None or share <= COMMON_PIECE_SHARE]
        chosen.append(kept or [p for p, _share in pieces])
    return chosen


def particular_grams(conn: Connection, index: str, value: str) -> list[str]:
    """The grams of ``value`` (already ``searched_text``, at least five characters) that a
    lookup through the gram index ``index`` asks for."""
    rows = conn.execute(GRAM_SHARES, {"value": value, "index": index}).all()
    return _particular(rows)[0]


def particular_chunks(conn: Connection, index: str, value: str) -> list[list[str]]:
    """For each of the five alignments, the chunks of ``value`` (already ``searched_text``,
    at least ``CHUNKED_LENGTH`` characters) a lookup through the chunk index ``index``
    asks for."""
    rows = conn.execute(CHUNK_SHARES, {"value": value, "index": index}).all()
    chosen = _particular(rows)
    if len(chosen) != 5:  # a shorter value: a caller's mistake, it would lose texts
        raise ValueError(f"{value!r} has no chunk at some alignment")
    return chosen
