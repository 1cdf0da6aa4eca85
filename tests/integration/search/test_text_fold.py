"""Substring lookups of distinct texts through the folded trigram index (migration 1900).

A text search first finds the distinct texts that contain the value: the folded value
inside the folded text (``netmap_text_fold``: lower case, every character that is not a
letter or digit replaced by ``q``), which the trigram index answers, *and* the value
inside the text (``ILIKE``). These tests hold the fold to its promise on a real
PostgreSQL: the pair answers exactly what the ``ILIKE`` alone answers, for any text and
value (wildcards, escapes, case, punctuation, other scripts), and an address-like value
among many address-like texts is read through the index with no more candidates than
texts that hold it folded, where the plain trigram index read hundreds. (Since
migrations 2300 and 2400 a value of five or more characters is looked up by its grams,
``test_text_grams.py``; the trigram statements here are the ones shorter values use.)
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from app import db
from app.search.postgres_queries import MATCHING_FACT_TEXT_IDS, MATCHING_TEXT_IDS
from app.search.postgres_values import distinct_text_contains, like_pattern, searched_text
from tests.support.sql import insert_address_texts, text_condition_answers

_CHARACTERS = st.characters(
    codec="utf-8",
    exclude_categories=("Cs",),
    # Letters, digits and the characters LIKE and the fold treat specially, more often.
    include_characters="%_\\.-:/ =,qQ0177aAİß",
)
_TEXTS = st.text(_CHARACTERS, max_size=24).map(lambda s: s.replace("\x00", ""))


@pytest.mark.parametrize(
    "grams",
    [None, "netmap_text_grams", "netmap_text_wide_grams"],
    ids=["trigrams", "grams", "wide-grams"],
)
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(pairs=st.lists(st.tuples(_TEXTS, _TEXTS), min_size=1, max_size=20))
@example(pairs=[("10.0.77.7", "0.77.7"), ("10q0q77q7", "0.77.7"), ("A_B", "a_b"), ("AxB", "a_b")])
@example(pairs=[("50% off", "0%"), ("path\\to", "h\\t"), ("CN=Bench CA,O=x", "ca,o")])
@example(
    pairs=[("host 10.0.77.70", "10.0.77.7"), ("10q0q77q7", "10.0.77.7"), ("İSTANBUL", "istanbul")]
)
def test_the_folded_condition_answers_what_ilike_answers(postgres_store, grams, pairs):
    """Each index condition (the folded trigrams, or the five- or eight-character grams
    of migrations 2300 and 2700, asked here even of values too short to have any) beside
    the exact ``ILIKE`` answers exactly what the ``ILIKE`` alone answers."""
    # All of the value's grams: the lookups ask for a subset (``postgres_grams``), which
    # every text holding all of them also holds.
    folded = distinct_text_contains(
        "x.text",
        "x.pattern",
        "x.value",
        grams=f"{grams}(x.value)" if grams else None,
        grammed_by=grams or "netmap_text_grams",
    )
    answers = text_condition_answers(folded, pairs)
    assert [indexed for _plain, indexed in answers] == [plain for plain, _indexed in answers]


def _nodes(plan: dict[str, Any]):
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)


@pytest.mark.parametrize(
    ("table", "statement", "index"),
    [
        ("search_asset_texts", MATCHING_TEXT_IDS[None], "ix_search_asset_texts_fold_trgm"),
        (
            "search_asset_fact_texts",
            MATCHING_FACT_TEXT_IDS[None],
            "ix_search_asset_fact_texts_fold_trgm",
        ),
    ],
)
def test_a_rare_address_among_many_is_read_through_the_folded_index(
    postgres_store, table, statement, index
):
    value = "10.0.77.7"
    with db.transaction() as conn:
        insert_address_texts(conn, table, 60_000)
        params = {"text": like_pattern(value), "value": searched_text(value), "cap": 1001}
        found = conn.execute(statement, params).scalars().all()
        analysed = conn.execute(
            sa.text("EXPLAIN (ANALYZE, FORMAT JSON) " + str(statement)), params
        ).scalar_one()
        # What the trigram index over the plain text (before migration 1900) hands back.
        conn.execute(sa.text(f"CREATE INDEX ix_plain ON {table} USING gin (text gin_trgm_ops)"))
        plain = conn.execute(
            sa.text(
                f"EXPLAIN (ANALYZE, FORMAT JSON) SELECT id FROM {table} WHERE text ILIKE :text"
            ),
            params,
        ).scalar_one()
    # 10.0.77.7 and 10.0.77.70-79: the texts that contain the value.
    assert len(found) == 11
    document = analysed if isinstance(analysed, list) else json.loads(analysed)
    nodes = list(_nodes(document[0]["Plan"]))
    scans = [node for node in nodes if node.get("Index Name") == index]
    assert scans, document
    # The index's candidates are the texts whose folded form holds ``10q0q77q7``: exactly
    # the eleven here. The plain trigram index reads the address as the words 10, 0, 77
    # and 7 and hands back every text with such words (all of which the check drops).
    assert scans[0]["Actual Rows"] == 11, document
    plain_document = plain if isinstance(plain, list) else json.loads(plain)
    plain_scans = [
        n for n in _nodes(plain_document[0]["Plan"]) if n.get("Index Name") == "ix_plain"
    ]
    assert plain_scans, plain_document
    assert plain_scans[0]["Actual Rows"] > 100, plain_document
