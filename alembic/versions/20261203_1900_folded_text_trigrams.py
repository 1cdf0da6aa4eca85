"""Substring lookups of distinct texts read trigrams across punctuation.

Revision ID: 20261203_1900
Revises: 20261202_1800
Create Date: 2026-12-03

A free-text search (``search_asset_texts``, migration 0170) and a ``cert.issuer:``,
``cert.subject:``, ``title:`` or ``server:`` clause (``search_asset_fact_texts``,
migrations 1610 and 1800) first find the distinct texts that contain the value, through
a trigram index. ``pg_trgm`` splits a text into words at every character that is not a
letter or digit, so an address such as ``10.0.77.7`` becomes the words ``10``, ``0``,
``77`` and ``7``: trigrams that nearly every address-like text has. The index then
hands back every text built of the same short words and the heap check throws almost
all of them away, at a cost that grows with the number of distinct texts (two million
certificate subjects at ten million endpoints). Host names fare alike at each dot.

``netmap_text_fold(text)`` lower-cases a text and replaces every character that is
not a letter or digit with ``q``, one for one, so a text is a single word whose
trigrams span its punctuation (``10q0q77q7``). The trigram index of each table is
rebuilt over the folded text. A search asks for the folded value inside the folded
text (through the index) *and* for the value inside the text (``ILIKE``, the exact
condition as before): the fold maps character by character, so a text that contains
the value always has a folded form that contains the folded value; the fold can only
admit extra candidates (``a.b`` and ``aqb`` fold alike), which the exact condition
drops. The answers are unchanged (``tests/integration/search/test_text_fold.py``).

The fold leaves no ``LIKE`` wildcard or escape character (``%``, ``_`` and ``\\`` are
not letters or digits), so the folded value is a pattern as it stands. The function is
plain SQL, so the planner inlines it and folds the searched value at plan time.
"""

from __future__ import annotations

from alembic import op

revision = "20261203_1900"
down_revision = "20261202_1800"
branch_labels = None
depends_on = None

# (table, the trigram index before, the trigram index over the folded text)
TABLES = (
    ("search_asset_texts", "ix_search_asset_texts_trgm", "ix_search_asset_texts_fold_trgm"),
    (
        "search_asset_fact_texts",
        "ix_search_asset_fact_texts_trgm",
        "ix_search_asset_fact_texts_fold_trgm",
    ),
)

FUNCTION = r"""
CREATE FUNCTION netmap_text_fold(value text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT regexp_replace(lower(value), '[^[:alnum:]]', 'q', 'g') $$;
"""


def upgrade() -> None:
    op.execute(FUNCTION)
    for table, before, after in TABLES:
        op.execute(
            f"CREATE INDEX {after} ON {table} USING gin (netmap_text_fold(text) gin_trgm_ops)"
        )
        op.execute(f"DROP INDEX {before}")
        # Statistics of the new index expression, for the planner's estimates.
        op.execute(f"ANALYZE {table}")


def downgrade() -> None:
    for table, before, after in TABLES:
        op.execute(f"CREATE INDEX {before} ON {table} USING gin (text gin_trgm_ops)")
        op.execute(f"DROP INDEX {after}")
    op.execute("DROP FUNCTION netmap_text_fold(text)")
