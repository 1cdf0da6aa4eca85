"""Which free texts a large share of an asset view's rows hold, as ``ANALYZE`` estimates.

A free text (``q``, or a bare word of the search language) is spelled in one of two
ways over the view. A rare one as the row's text key among the distinct texts that hold
it (``search_asset_texts``, migration 0170): named outright after a lookup, or a
subquery the planner can start from, through the texts' indexes and then the view's
text-key index. A common one cannot be started from: a page walks the view in its order
and stops after a page of matches, and with the subquery each row walked is one probe of
the texts table by its key, an index descent and a heap page at a random place. Once
the texts outgrow shared buffers those come from the operating system's cache, so the
probes grew with the estate: ``tomcat``, a fifth of the rows, took 2.97 ms a page among
a million named assets and 7.35 ms among ten million. The row's own text
(``TEXT_EXPRESSION``, the same value the key is the md5 of) gives the same answer
without a probe, tested on the row the walk already read.

The planner cannot choose between two spellings, so the search chooses, by the
statistics ``ANALYZE`` keeps of the text expression (migration 2500): the share of rows
estimated to hold the text the way the planner estimates an ``ILIKE`` (the most common
values that hold it, plus the rest's share times the fraction of histogram bounds that
hold it). At ``COMMON_TEXT_SHARE`` or more the row's own text is tested; otherwise, and
without statistics, the texts are looked up as before. A wrong choice costs time, never
an answer: the two spellings match the same rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.search.postgres_statistics import cached
from app.search.postgres_values import searched_text

# A text estimated in at least this share of the rows is tested on each row's own text.
# A page then walks about 50 / share rows (2,500 at most); a text in fewer rows is
# cheaper to start from among the distinct texts once the view holds more than about
# 50 / share² rows (125,000 at 2 %), and below that either way is a few milliseconds.
COMMON_TEXT_SHARE = 0.02

# The statistics object of each view's text expression (migration 2500).
TEXT_STATISTICS = "st_{table}_text"
# ``most_common_vals`` and ``histogram_bounds`` are ``anyarray``s, read as text[] through
# their text form.
EXPRESSION_STATISTICS = sa.text(
    "SELECT null_frac, CAST(CAST(most_common_vals AS text) AS text[]) AS values, "
    "most_common_freqs AS shares, CAST(CAST(histogram_bounds AS text) AS text[]) AS bounds "
    "FROM pg_stats_ext_exprs "
    "WHERE statistics_schemaname = current_schema() AND statistics_name = :name "
    "ORDER BY inherited LIMIT 1"
)


@dataclass(frozen=True)
class TextStatistics:
    """What ``ANALYZE`` sampled of a view's text expression."""

    null_share: float
    common: tuple[tuple[str, float], ...]  # the most common texts, each with its share
    bounds: tuple[str, ...]  # the histogram of the other texts

    def share_holding(self, text: str) -> float:
        """The estimated share of rows whose text holds ``text`` (case folded, as ``ILIKE``)."""
        needle = searched_text(text).lower()
        common = sum(share for value, share in self.common if needle in value.lower())
        rest = max(0.0, 1.0 - self.null_share - sum(share for _, share in self.common))
        if not self.bounds:
            return common
        held = sum(needle in bound.lower() for bound in self.bounds) / len(self.bounds)
        return common + rest * held


def text_statistics(conn: Connection, table: str) -> TextStatistics | None:
    """The statistics of ``table``'s text expression, as this process last read them; None
    before the view is analysed (or for a role that may not read them)."""
    name = TEXT_STATISTICS.format(table=table)
    return cached(conn, name, lambda c: _read(c, name))


def _read(conn: Connection, name: str) -> TextStatistics | None:
    row = conn.execute(EXPRESSION_STATISTICS, {"name": name}).first()
    if row is None or (row.values is None and row.bounds is None):
        return None
    values = row.values or []
    return TextStatistics(
        null_share=float(row.null_frac or 0.0),
        common=tuple(zip(values, (float(s) for s in row.shares[: len(values)]), strict=True)),
        bounds=tuple(row.bounds or ()),
    )


def common_texts(conn: Connection, table: str, texts: Iterable[str]) -> frozenset[str]:
    """Those of ``texts`` that ``table``'s statistics put in ``COMMON_TEXT_SHARE`` or more
    of its rows: a search tests them on each row's own text."""
    wanted = set(texts)
    if not wanted:
        return frozenset()
    statistics = text_statistics(conn, table)
    if statistics is None:
        return frozenset()
    return frozenset(t for t in wanted if statistics.share_holding(t) >= COMMON_TEXT_SHARE)
