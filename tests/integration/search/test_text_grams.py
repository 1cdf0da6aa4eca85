"""Text fact lookups through five-character grams (migration 2300).

A text fact clause (``cert.subject:``…) whose value has five or more characters finds
its distinct values through a GIN index of each folded value's five-character grams
(``netmap_text_grams``); a shorter one keeps the folded trigram index (migration 1900).
``test_text_fold.py`` holds both conditions to what ``ILIKE`` answers for any text and
value. These tests show, on a real PostgreSQL, which index each value reads and what it
costs: among many address-like values, a rare address is read through the gram index
with exactly its matching values as candidates, and a fraction of the index pages the
trigram index needs for the same answer (its lists of common trigrams grow with the
values).
"""

from __future__ import annotations

import json

import sqlalchemy as sa

from app import db
from app.search.postgres_queries import MATCHING_FACT_TEXT_IDS, matching_fact_text_ids
from app.search.postgres_values import like_pattern, looked_up_by_grams, searched_text
from app.search.query_language import parse_query
from tests.support.plans import nodes
from tests.support.sql import insert_address_texts

TABLE, PREFIX = "search_asset_fact_texts", "ix_search_asset_fact_texts"


def _index_scan(conn, statement, value: str) -> dict:
    """The index scan of ``statement``'s plan for ``value``, run with buffer counts."""
    params = {"text": like_pattern(value), "value": searched_text(value), "cap": 1001}
    answer = conn.execute(
        sa.text("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + str(statement)), params
    ).scalar_one()
    document = answer if isinstance(answer, list) else json.loads(answer)
    scans = [node for node in nodes(document[0]["Plan"]) if node.get("Index Name")]
    assert len(scans) == 1, document
    return scans[0]


def _pages(scan: dict) -> int:
    return scan["Shared Hit Blocks"] + scan["Shared Read Blocks"]


def test_the_grams_are_the_folded_texts_five_character_substrings(postgres_store):
    with db.transaction() as conn:
        grams = conn.execute(
            sa.text(
                "SELECT netmap_text_grams('10.0.77.7'), netmap_text_grams('Ab-Cd'), "
                "netmap_text_grams('abcd'), netmap_text_grams('')"
            )
        ).one()
    assert sorted(grams[0]) == sorted(["10q0q", "0q0q7", "q0q77", "0q77q", "q77q7"])
    assert grams[1] == ["abqcd"]
    assert grams[2] == [] and grams[3] == []


def test_a_value_of_five_characters_or_more_is_looked_up_by_its_grams():
    assert looked_up_by_grams("10.0.77.7")
    assert looked_up_by_grams("nginx")
    assert not looked_up_by_grams("ngin")
    # Control characters are not searched for, so they do not count.
    assert not looked_up_by_grams("ab\x01\x02cd")


def test_a_rare_address_among_many_reads_a_fraction_of_the_trigram_pages(postgres_store):
    statements, prefix = MATCHING_FACT_TEXT_IDS, PREFIX
    with db.transaction() as conn:
        insert_address_texts(conn, TABLE, 100_000)
        # As autovacuum leaves them: each search also reads GIN's pending list of recent
        # entries whole, the same for both indexes, which would hide what each one costs.
        for index in ("grams", "fold_trgm"):
            conn.execute(sa.text(f"SELECT gin_clean_pending_list('{prefix}_{index}')"))
        found = conn.execute(
            statements[True],
            {"text": like_pattern("10.0.77.7"), "value": "10.0.77.7", "cap": 1001},
        ).all()
        grams = _index_scan(conn, statements[True], "10.0.77.7")
        trigrams = _index_scan(conn, statements[False], "10.0.77.7")
    # 10.0.77.7 and 10.0.77.70-79.
    assert len(found) == 11
    assert grams["Index Name"] == f"{prefix}_grams"
    assert trigrams["Index Name"] == f"{prefix}_fold_trgm"
    # Both indexes hand back exactly the eleven texts that hold the folded value...
    assert grams["Actual Rows"] == trigrams["Actual Rows"] == 11
    # ...but the trigram index steps through the long lists of ``10q``, ``q0q`` and
    # ``q77`` (held by a growing share of the texts) to intersect them, where the rarest
    # gram, ``q77q7``, is held by these eleven alone.
    assert _pages(grams) * 3 <= _pages(trigrams), (grams, trigrams)


def test_a_value_shorter_than_five_characters_keeps_the_trigram_index(postgres_store):
    statements, prefix = MATCHING_FACT_TEXT_IDS, PREFIX
    with db.transaction() as conn:
        insert_address_texts(conn, TABLE, 20_000)
        scan = _index_scan(conn, statements[False], "77.7")
        found = conn.execute(
            statements[False], {"text": like_pattern("77.7"), "value": "77.7", "cap": 1001}
        ).all()
        expected = conn.execute(
            sa.text(f"SELECT count(*) FROM {TABLE} WHERE text LIKE '%77.7%'")
        ).scalar_one()
    assert scan["Index Name"] == f"{prefix}_fold_trgm"
    assert len(found) == expected > 0


def test_the_lookup_finds_the_same_values_whichever_index_the_value_picks(postgres_store):
    with db.transaction() as conn:
        insert_address_texts(conn, TABLE, 20_000)
        for value in ("10.0.77.7", "0.77.7", "77.7", "10.0.7", "0.7"):
            where = parse_query(f'cert.subject:"{value}"').node
            numbers = matching_fact_text_ids(conn, where).get(("cert.subject", value))
            expected = conn.execute(
                sa.text(f"SELECT number FROM {TABLE} WHERE text LIKE :p"), {"p": f"%{value}%"}
            ).scalars()
            if numbers is None:  # more than the cap: left to the expression's own ILIKE
                assert len(list(expected)) > 1000
            else:
                assert sorted(numbers) == sorted(expected), value


def test_analyze_finds_the_function_with_only_the_catalogue_on_the_path(postgres_store):
    """From PostgreSQL 17 on, ``ANALYZE``, ``VACUUM`` and ``REINDEX`` evaluate index
    expressions with ``search_path`` set to ``pg_catalog``: the gram function must call
    nothing it would look up on the path. Set the same path by hand on any version."""
    with db.transaction() as conn:
        insert_address_texts(conn, TABLE, 100)
        schema = conn.execute(
            sa.text(
                "SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE c.oid = 'search_asset_fact_texts'::regclass"
            )
        ).scalar_one()
    with db.get_engine().connect() as conn:
        conn.execute(sa.text("SET search_path = pg_catalog, pg_temp"))
        conn.execute(sa.text(f'ANALYZE "{schema}".search_asset_fact_texts'))
        conn.execute(sa.text(f'REINDEX INDEX "{schema}".ix_search_asset_fact_texts_grams'))
        conn.rollback()


def test_a_new_installation_leaves_the_values_table_unanalysed(postgres_store):
    """The migration analyses the values table only when it holds values. Statistics of
    an empty table ("analysed, no rows") would make the plans cached while a first bulk
    write fills it read the table whole for every value the numbering triggers look up
    (``bench search``'s seed of 100,000 assets took 67 s instead of 10)."""
    with db.transaction() as conn:
        reltuples = conn.execute(
            sa.text("SELECT reltuples FROM pg_class WHERE oid = CAST(:t AS regclass)"),
            {"t": TABLE},
        ).scalar_one()
    assert reltuples < 0  # never analysed: the planner sizes it by its pages
