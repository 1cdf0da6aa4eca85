"""Which pieces of a searched value a distinct-text lookup asks for.

A value long enough finds its distinct texts through a GIN index of pieces of each
folded text: for the text fact values every five-character substring
(``netmap_text_grams``, migration 2300) or, for a value of eight characters or more,
every eight-character one (``netmap_text_wide_grams``, migration 2700); for the free
texts, the consecutive five-character chunks (``netmap_text_chunks``, migration 2400)
or, for a value of fourteen characters or more, ten-character chunks starting at every
fifth character (``netmap_text_wide_chunks``, migration 2600). A free text is looked up
at each of the five alignments to the text's chunk starts, ORed. GIN intersects the
posting lists of every piece a lookup asks for, and a piece that nearly every text holds
— ``hostq`` and ``qcorp`` of ``host-7-77-7.corp``, when every host is named
``host-….corp….`` — has a list as long as the table: among five million such texts the
two of them were three quarters of the lookup's index pages, and their share grows with
the table.

Any subset of the pieces finds every text that holds the value (each such text holds all
of them), and the lookup's ``ILIKE`` decides exactly, so a lookup may leave the common
pieces out. Which are common is what ``ANALYZE`` already records of the index's
expression: its most common elements and the share of texts holding each (``pg_stats``).
A piece held by more than ``COMMON_PIECE_SHARE`` of the texts is left out, unless every
piece of that lookup is that common (then all are asked for). An eight-character gram is
particular enough that two of them which the statistics do not list as common at all
find the value's few texts alone: a wide-gram lookup with two or more such pieces asks
for those only (``Cut.rare_suffice``), since a piece held by a fixed block of
addresses (``ostq10q0`` of ``host 10.0.77.7``: every title in ``10.0.0.0/16``) falls
under any fixed share as the table grows and would be asked for, list and all, by the
larger estate. With no statistics yet (a new table, or a role that may not read them),
every piece is asked for. Each process keeps what it read for a few minutes
(``postgres_statistics``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.search.postgres_statistics import cached

# Pieces held by more than this share of the distinct texts are left out of a lookup.
# Why not fewer: at one alignment a rare piece alone can still match hundreds of texts
# (``0q77q`` of ``host-10-0-77-7.corp`` matched 313 among a million named hosts), each
# a heap page to recheck, and the set grows with the table; a piece held by a few
# percent (``7qcor``, 3 %) cuts them to a handful for a few index pages, since GIN
# steps through a long list only where the rare one points. Why not more: the lists of
# pieces a fifth of the texts hold cost more pages than they save (measured at 1M and
# 3M texts: ``docs/inventory.md``, "Pieces nearly every text holds").
COMMON_PIECE_SHARE = 0.05


@dataclass(frozen=True)
class Cut:
    """One cut of the folded distinct texts into pieces of ``width`` characters
    (``function``, SQL), with its GIN index. ``shortest``: the folded length a value
    needs for its lookup to read this index without losing a text that holds it.
    ``rare_suffice``: a lookup with two or more pieces the index's statistics do not
    list asks for those alone (see the module's docstring)."""

    function: str
    index: str
    width: int
    rare_suffice: bool = False

    @property
    def shortest(self) -> int:
        return self.width


C = TypeVar("C", bound=Cut)


@dataclass(frozen=True)
class Chunking(Cut):
    """A cut of the free texts into chunks starting at every fifth character.

    A value needs a whole piece at each of the five alignments to those starts:
    ``shortest`` is ``width`` plus the four characters before the first piece at the
    last alignment; a shorter one would lose the texts holding it at an alignment
    without a piece."""

    @property
    def shortest(self) -> int:
        return self.width + 4


# Five-character chunks (migration 2400) and ten-character ones (migration 2600). Five
# characters of a host name named after its address are shared by more texts the larger
# the estate (``0q77q`` of ``host-10-0-77-7.corp``); ten are particular to the host, so a
# value long enough reads the wide ones.
CHUNKS = Chunking("netmap_text_chunks", "ix_search_asset_texts_chunks", 5)
WIDE_CHUNKS = Chunking("netmap_text_wide_chunks", "ix_search_asset_texts_wide_chunks", 10)
CHUNKINGS = (CHUNKS, WIDE_CHUNKS)


def chunking_for(value: str) -> Chunking | None:
    """The chunks a free-text lookup of ``value`` (already ``searched_text``) reads: the
    widest its length allows; None for a value too short for any (trigrams then)."""
    return _widest(CHUNKINGS, value)


@dataclass(frozen=True)
class Grams(Cut):
    """A cut of the text fact values into every substring of ``width`` characters: any
    value that long has all the grams a text holding it has."""


# Five-character grams (migration 2300) and eight-character ones (migration 2700). Five
# characters of an address are shared by more values the larger the estate (``q77q7`` of
# ``10.0.77.7``); eight are particular to an address block of 256 or a name.
GRAMS = Grams("netmap_text_grams", "ix_search_asset_fact_texts_grams", 5)
WIDE_GRAMS = Grams(
    "netmap_text_wide_grams", "ix_search_asset_fact_texts_wide_grams", 8, rare_suffice=True
)
GRAMINGS = (GRAMS, WIDE_GRAMS)
# Pieces not listed as common a wide-gram lookup needs to ask for those alone.
RARE_PIECES_ENOUGH = 2


def grams_for(value: str) -> Grams | None:
    """The grams a text fact lookup of ``value`` (already ``searched_text``) reads: the
    widest its length allows; None for a value too short for any (trigrams then)."""
    return _widest(GRAMINGS, value)


def _widest(cuts: tuple[C, ...], value: str) -> C | None:
    """The widest of ``cuts`` whose ``shortest`` ``value`` reaches."""
    fitting = [c for c in cuts if len(value) >= c.shortest]
    return max(fitting, key=lambda c: c.width) if fitting else None


# The value's distinct grams, as one lookup (part 0).
GRAM_PIECES = {
    g: sa.text(
        f"SELECT DISTINCT 0 AS part, p AS piece FROM unnest({g.function}(:value)) AS p "  # noqa: S608 - module constants; the value is bound
        "ORDER BY 1, 2"
    )
    for g in GRAMINGS
}
# The value's pieces cut from each offset 0-4 of its folded form by each chunking (part:
# the offset): where a text holds the value at that alignment, these are chunks of the
# text.
CHUNK_PIECES = {
    c: sa.text(
        "SELECT DISTINCT a.part, c AS piece FROM generate_series(0, 4) AS a(part) "  # noqa: S608 - module constants; the value is bound
        f"CROSS JOIN unnest({c.function}(substr(netmap_text_fold(:value), a.part + 1))) AS c "
        "ORDER BY 1, 2"
    )
    for c in CHUNKINGS
}
# The most common elements of the index's expression and their shares (the shares array
# carries three more numbers at its end, which ``zip`` leaves out). ``most_common_elems``
# is an ``anyarray``, read as text[] through its text form; with the schema and name given
# as constants the view finds its one row through the catalogue's indexes.
COMMON_PIECES = sa.text(
    "SELECT CAST(CAST(most_common_elems AS text) AS text[]) AS pieces, "
    "most_common_elem_freqs AS shares FROM pg_stats "
    "WHERE schemaname = current_schema() AND tablename = :index"
)


def piece_shares(conn: Connection, index: str) -> dict[str, float]:
    """The share of texts holding each of the most common pieces of ``index`` (none
    without statistics), as this process last read them."""
    return cached(conn, f"common pieces of {index}", lambda c: _read_shares(c, index))


def _read_shares(conn: Connection, index: str) -> dict[str, float]:
    row = conn.execute(COMMON_PIECES, {"index": index}).first()
    if row is None or row.pieces is None:
        return {}
    # the shares run three numbers longer than the pieces
    return dict(zip(row.pieces, row.shares[: len(row.pieces)], strict=True))


def _particular(conn: Connection, cut: Cut, rows) -> list[list[str]]:
    """Each lookup's pieces (``rows``: part, piece) through ``cut``'s index, less the
    common ones; where ``cut.rare_suffice``, only the unlisted ones if enough."""
    shares = piece_shares(conn, cut.index)
    parts: dict[int, list[str]] = {}
    for row in rows:
        parts.setdefault(row.part, []).append(row.piece)
    chosen = []
    for _part, pieces in sorted(parts.items()):
        unlisted = [p for p in pieces if p not in shares]
        if cut.rare_suffice and shares and len(unlisted) >= RARE_PIECES_ENOUGH:
            chosen.append(unlisted)
            continue
        kept = [p for p in pieces if shares.get(p, 0.0) <= COMMON_PIECE_SHARE]
        chosen.append(kept or pieces)
    return chosen


def particular_grams(conn: Connection, grams: Grams, value: str) -> list[str]:
    """The grams of ``value`` (already ``searched_text``) that a lookup through ``grams``'
    index asks for; none for a value shorter than their width folded."""
    rows = conn.execute(GRAM_PIECES[grams], {"value": value}).all()
    if not rows:
        return []
    return _particular(conn, grams, rows)[0]


def particular_chunks(conn: Connection, chunking: Chunking, value: str) -> list[list[str]] | None:
    """For each of the five alignments, the pieces of ``value`` (already ``searched_text``)
    a lookup through ``chunking``'s index asks for; None when the folded value is shorter
    than the chunking's ``shortest`` (no piece at some alignment: such a lookup would
    lose the texts holding the value there)."""
    rows = conn.execute(CHUNK_PIECES[chunking], {"value": value}).all()
    if len({row.part for row in rows}) != 5:
        return None
    return _particular(conn, chunking, rows)
