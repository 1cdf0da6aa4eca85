"""Distinct-text lookups through grams and chunks (migrations 2300, 2400, 2600, 2700).

A text fact clause (``cert.subject:``…) whose value has five or more characters finds
its distinct values through a GIN index of each folded value's five-character grams
(``netmap_text_grams``), or of its eight-character ones for a value of eight or more
(``netmap_text_wide_grams``), less the grams nearly every value holds
(``postgres_grams``); a free text (``q``) of nine or more through its chunks; a shorter
one keeps the folded trigram index (migration 1900).
``test_text_fold.py`` holds both conditions to what ``ILIKE`` answers for any text and
value. These tests show, on a real PostgreSQL, which index each value reads and what it
costs: among many address-like values, a rare address is read through the gram index
with exactly its matching values as candidates, and a fraction of the index pages the
trigram index needs for the same answer (its lists of common trigrams grow with the
values).
"""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from app import db
from app.search import postgres_grams, postgres_statistics
from app.search.postgres_grams import (
    CHUNKS,
    GRAMS,
    WIDE_CHUNKS,
    WIDE_GRAMS,
    chunking_for,
    grams_for,
    particular_chunks,
    particular_grams,
    piece_shares,
)
from app.search.postgres_language import condition as language_condition
from app.search.postgres_queries import (
    MATCHING_FACT_TEXT_IDS,
    MATCHING_TEXT_IDS,
    by_pieces,
    chunk_lookup,
    matching_fact_text_ids,
    matching_language_text_ids,
    matching_text_ids,
    text_lookup,
)
from app.search.postgres_values import (
    distinct_text_contains,
    like_pattern,
    searched_text,
)
from app.search.query_language import parse_query
from tests.support.plans import nodes
from tests.support.sql import (
    insert_address_texts,
    insert_host_texts,
    text_condition_answers,
)

TABLE, PREFIX = "search_asset_fact_texts", "ix_search_asset_fact_texts"


def _index_scan(conn, statement, value: str) -> dict:
    """The one index scan of ``statement``'s plan for ``value`` (a text fact value, bound
    as a search binds it), run with buffer counts."""
    scans = _index_scans(conn, statement, text_lookup(conn, TABLE, value, 1001)[1])
    assert len(scans) == 1, scans
    return scans[0]


def _index_scans(conn, statement, params: dict) -> list[dict]:
    """The index scans of ``statement``'s plan with ``params``, run with buffer counts."""
    answer = conn.execute(
        sa.text("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + str(statement)), params
    ).scalar_one()
    document = answer if isinstance(answer, list) else json.loads(answer)
    return [node for node in nodes(document[0]["Plan"]) if node.get("Index Name")]


def _pages(scan: dict) -> int:
    return scan["Shared Hit Blocks"] + scan["Shared Read Blocks"]


def _cut(function: str, *texts: str) -> list[list[str]]:
    """What the SQL ``function`` (a gram or chunk function) makes of each of ``texts``."""
    columns = ", ".join(f"{function}(CAST(:t{n} AS text))" for n in range(len(texts)))
    with db.transaction() as conn:
        row = conn.execute(
            sa.text(f"SELECT {columns}"), {f"t{n}": text for n, text in enumerate(texts)}
        ).one()
    return list(row)


def test_the_grams_are_the_folded_texts_five_character_substrings(postgres_store):
    grams = _cut("netmap_text_grams", "10.0.77.7", "Ab-Cd", "abcd", "")
    assert sorted(grams[0]) == sorted(["10q0q", "0q0q7", "q0q77", "0q77q", "q77q7"])
    assert grams[1] == ["abqcd"]
    assert grams[2] == [] and grams[3] == []


def test_the_wide_grams_are_the_folded_texts_eight_character_substrings(postgres_store):
    wide = _cut("netmap_text_wide_grams", "10.0.77.7", "Ab-Cd-Ef", "abcdefg", "")
    assert sorted(wide[0]) == ["0q0q77q7", "10q0q77q"]
    assert wide[1] == ["abqcdqef"]
    assert wide[2] == [] and wide[3] == []


def test_a_fact_value_reads_the_widest_grams_its_length_allows():
    assert grams_for("10.0.77.7") is WIDE_GRAMS and grams_for("1.2.3.45") is WIDE_GRAMS
    assert grams_for("1.2.3.4") is GRAMS and grams_for("nginx") is GRAMS
    assert grams_for("ngin") is None  # trigrams
    assert (GRAMS.shortest, WIDE_GRAMS.shortest) == (5, 8)
    # Control characters are not searched for, so they do not count.
    assert grams_for(searched_text("ab\x01\x02cd")) is None
    assert by_pieces(TABLE, "nginx") and not by_pieces(TABLE, "ab\x01\x02cd")


def _five_gram_lookup(conn, value: str) -> tuple:
    """The five-character gram lookup of ``value``, as a value of five to seven
    characters reads it."""
    params = text_lookup(conn, TABLE, value, 1001)[1]
    grams = particular_grams(conn, GRAMS, searched_text(value))
    return MATCHING_FACT_TEXT_IDS[GRAMS], {**params, "grams": grams}


def test_a_rare_address_among_many_reads_a_fraction_of_the_trigram_pages(postgres_store):
    statements, prefix, value = MATCHING_FACT_TEXT_IDS, PREFIX, "10.0.77.7"
    with db.transaction() as conn:
        insert_address_texts(conn, TABLE, 100_000)
        # As autovacuum leaves them: each search also reads GIN's pending list of recent
        # entries whole, the same for every index, which would hide what each one costs.
        for index in ("grams", "wide_grams", "fold_trgm"):
            conn.execute(sa.text(f"SELECT gin_clean_pending_list('{prefix}_{index}')"))
        statement, params = text_lookup(conn, TABLE, value, 1001)
        found = conn.execute(statement, params).all()
        wide = _index_scan(conn, statement, value)
        grams = _index_scans(conn, *_five_gram_lookup(conn, value))[0]
        trigrams = _index_scan(conn, statements[None], value)
    # 10.0.77.7 and 10.0.77.70-79; nine characters read the eight-character grams.
    assert len(found) == 11 and statement is statements[WIDE_GRAMS]
    assert wide["Index Name"] == f"{prefix}_wide_grams"
    assert grams["Index Name"] == f"{prefix}_grams"
    assert trigrams["Index Name"] == f"{prefix}_fold_trgm"
    # Every index hands back exactly the eleven texts that hold the folded value...
    assert wide["Actual Rows"] == grams["Actual Rows"] == trigrams["Actual Rows"] == 11
    # ...but the trigram index steps through the long lists of ``10q``, ``q0q`` and
    # ``q77`` (held by a growing share of the texts) to intersect them, where the rarest
    # five-character gram, ``q77q7``, is held by these eleven alone, and the
    # eight-character ``10q0q77q`` by the 256 of 10.0.77.0/24 whatever the estate.
    assert _pages(grams) * 3 <= _pages(trigrams), (grams, trigrams)
    assert _pages(wide) <= _pages(grams), (wide, grams)


def test_a_wide_gram_lookup_asks_for_only_the_grams_the_statistics_do_not_list(
    postgres_store,
):
    """``host 10.0.77.7`` among the page titles of 100,000 hosts spread over 10.0.0.0/8:
    ``hostq10q`` is in every title, and the grams of an address block (``ostq10q0``: 10.0.
    …) in a share that falls as the estate grows, so no fixed share would keep them out.
    The grams the statistics do not list at all (``q10q0q77``, ``0q0q77q7``…) are rare
    enough together, so only they are asked for; they hand back the eleven titles that
    hold the value, and nothing else to recheck."""
    value = "host 10.0.77.7"
    with db.transaction() as conn:
        conn.execute(
            sa.text(
                f"INSERT INTO {TABLE} (id, text) SELECT md5(t)::uuid, t FROM (SELECT "
                "'Sign in - host 10.' || (a >> 16 & 255) || '.' || (a >> 8 & 255) || '.' "
                "|| (a & 255) AS t FROM (SELECT CAST(h AS bigint) * 40503 % 16777216 AS a "
                "FROM generate_series(0, 99999) AS h) x "
                "UNION SELECT 'Sign in - host 10.0.77.7' || d "
                "FROM unnest(ARRAY['', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9']) AS d) s "
                "ON CONFLICT (id) DO NOTHING"
            )
        )
        conn.execute(sa.text(f"ANALYZE {TABLE}"))
        conn.execute(sa.text(f"SELECT gin_clean_pending_list('{WIDE_GRAMS.index}')"))
        shares = piece_shares(conn, WIDE_GRAMS.index)
        every = _cut("netmap_text_wide_grams", value)[0]
        asked = particular_grams(conn, WIDE_GRAMS, value)
        statement, params = text_lookup(conn, TABLE, value, 1001)
        found = conn.execute(statement, params).scalars().all()
        scan = _index_scans(conn, statement, params)[0]
    listed = {g: shares[g] for g in every if g in shares}
    assert shares["hostq10q"] > 0.9
    # A listed gram under the fixed share is left out too: only the unlisted are asked.
    assert any(share <= postgres_grams.COMMON_PIECE_SHARE for share in listed.values()), listed
    assert sorted(asked) == sorted(g for g in every if g not in shares) and len(asked) >= 2
    assert statement is MATCHING_FACT_TEXT_IDS[WIDE_GRAMS] and params["grams"] == asked
    assert len(found) == scan["Actual Rows"] == 11


def test_a_value_shorter_than_five_characters_keeps_the_trigram_index(postgres_store):
    statements, prefix = MATCHING_FACT_TEXT_IDS, PREFIX
    with db.transaction() as conn:
        insert_address_texts(conn, TABLE, 20_000)
        scan = _index_scan(conn, statements[None], "77.7")
        found = conn.execute(
            statements[None], {"text": like_pattern("77.7"), "value": "77.7", "cap": 1001}
        ).all()
        expected = conn.execute(
            sa.text(f"SELECT count(*) FROM {TABLE} WHERE text LIKE '%77.7%'")
        ).scalar_one()
    assert scan["Index Name"] == f"{prefix}_fold_trgm"
    assert len(found) == expected > 0


def test_the_lookup_finds_the_same_values_whichever_index_the_value_picks(postgres_store):
    with db.transaction() as conn:
        insert_address_texts(conn, TABLE, 20_000)
        for value in ("10.0.77.7", "10.0.77", "0.77.7", "77.7", "10.0.7", "0.7", "10.0.1."):
            where = parse_query(f'cert.subject:"{value}"').node
            numbers = matching_fact_text_ids(conn, where).get(("cert.subject", value))
            expected = conn.execute(
                sa.text(f"SELECT number FROM {TABLE} WHERE text LIKE :p"), {"p": f"%{value}%"}
            ).scalars()
            if numbers is None:  # more than the cap: left to the expression's own ILIKE
                assert len(list(expected)) > 1000
            else:
                assert sorted(numbers) == sorted(expected), value


@pytest.mark.parametrize(
    ("table", "index"),
    [
        ("search_asset_fact_texts", "ix_search_asset_fact_texts_grams"),
        ("search_asset_fact_texts", "ix_search_asset_fact_texts_wide_grams"),
        ("search_asset_texts", "ix_search_asset_texts_chunks"),
        ("search_asset_texts", "ix_search_asset_texts_wide_chunks"),
    ],
)
def test_analyze_finds_the_function_with_only_the_catalogue_on_the_path(
    postgres_store, table, index
):
    """From PostgreSQL 17 on, ``ANALYZE``, ``VACUUM`` and ``REINDEX`` evaluate index
    expressions with ``search_path`` set to ``pg_catalog``: the gram and chunk functions
    must call nothing they would look up on the path. Set the same path by hand on any
    version."""
    with db.transaction() as conn:
        insert_address_texts(conn, table, 100)
        schema = conn.execute(
            sa.text(
                "SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE c.oid = CAST(:t AS regclass)"
            ),
            {"t": table},
        ).scalar_one()
    with db.get_engine().connect() as conn:
        conn.execute(sa.text("SET search_path = pg_catalog, pg_temp"))
        conn.execute(sa.text(f'ANALYZE "{schema}".{table}'))
        conn.execute(sa.text(f'REINDEX INDEX "{schema}".{index}'))
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


# Free text (migrations 2400 and 2600) and the pieces a lookup asks for (app.search.postgres_grams).

FREE = "search_asset_texts"
HOST = "host-0-77-7.corp"
_PIECE = st.characters(codec="utf-8", exclude_categories=("Cs", "Cc"), include_characters=".-q7")


def test_the_chunks_are_the_folded_texts_consecutive_five_character_pieces(postgres_store):
    chunks = _cut(
        "netmap_text_chunks",
        "host-7-77-7.corp3.example.com",
        "Ab-Cd",
        "abcd",
        "",
        "a,b\nc\x1fdefghij",
    )
    assert chunks[0] == ["hostq", "7q77q", "7qcor", "p3qex", "ample"]  # "qcom" left over
    assert chunks[1] == ["abqcd"] and chunks[2] == [] and chunks[3] == []
    assert chunks[4] == ["aqbqc", "qdefg"]


def test_the_wide_chunks_are_ten_characters_starting_at_every_fifth(postgres_store):
    wide = _cut(
        "netmap_text_wide_chunks",
        "host-7-77-7.corp3.example.com",
        "abcdefghi",
        "abcdefghijklmn",
        "ABCDEFGHIJKLMNO",
        "",
        "a,b\nc\x1fdefghijklmn",
    )
    # From the first character, then from the sixth; the tails ("ampleqcom", "qcom") left.
    assert wide[0] == ["hostq7q77q", "7qcorp3qex", "7q77q7qcor", "p3qexample"]
    assert wide[1] == [] and wide[4] == []
    assert wide[2] == ["abcdefghij"]  # "fghijklmn" is one short
    assert wide[3] == ["abcdefghij", "fghijklmno"]
    assert wide[5] == ["aqbqcqdefg", "qdefghijkl"]


def test_a_free_text_reads_the_widest_chunks_its_length_allows():
    assert chunking_for("host-0-7") is None  # trigrams
    assert chunking_for("host-0-77") is CHUNKS and chunking_for("0-77-7.corp") is CHUNKS
    assert chunking_for("host-0-77-7.c") is CHUNKS  # thirteen characters
    assert chunking_for("host-0-77-7.co") is WIDE_CHUNKS
    assert chunking_for(HOST) is WIDE_CHUNKS
    assert (CHUNKS.shortest, WIDE_CHUNKS.shortest) == (9, 14)


def _rows_of(shortest: int):
    """Texts that hold a value of ``shortest`` to twenty characters after some text and
    before some more (``held``), or stand beside it (not ``held``)."""
    return st.lists(
        st.tuples(
            st.text(_PIECE, max_size=12),
            st.text(_PIECE, min_size=shortest, max_size=20),
            st.text(_PIECE, max_size=12),
            st.booleans(),
        ),
        min_size=1,
        max_size=15,
    )


def _chunk_condition_agrees_with_ilike(chunking, rows) -> None:
    """At whichever offset the value stands in a text, the five ORed lookups of
    ``chunking`` (every piece asked for) beside the ``ILIKE`` answer what the ``ILIKE``
    alone answers."""
    chunks = [f"{chunking.function}(substr(netmap_text_fold(x.value), {p + 1}))" for p in range(5)]
    condition = distinct_text_contains(
        "x.text", "x.pattern", "x.value", chunks=chunks, chunked_by=chunking.function
    )
    pairs = [
        (before + value + after if held else before + after + value[1:], value)
        for before, value, after, held in rows
    ]
    answers = text_condition_answers(condition, pairs)
    assert [indexed for _plain, indexed in answers] == [plain for plain, _indexed in answers]


_PROPERTY = settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@_PROPERTY
@given(rows=_rows_of(9))
@example(rows=[("SSH-2.0 x", "host-0-77-7.corp", ".example", True), ("ab", "İstanbul-ß", "", True)])
def test_the_chunk_condition_finds_every_text_that_holds_the_value(postgres_store, rows):
    _chunk_condition_agrees_with_ilike(CHUNKS, rows)


@_PROPERTY
@given(rows=_rows_of(14))
@example(rows=[("SSH-2.0 x", "host-10-0-77-7.corp", ".example", True)])
@example(rows=[("a", "İstanbul-ß-straße", "", True), ("", "bcdefghijklmno", "", False)])
def test_the_wide_chunk_condition_finds_every_text_that_holds_the_value(postgres_store, rows):
    _chunk_condition_agrees_with_ilike(WIDE_CHUNKS, rows)


@_PROPERTY
@given(rows=_rows_of(8))
@example(rows=[("Sign in - ", "host 10.0.77.7", "0", True), ("a", "İstanbul-ß", "", True)])
def test_the_wide_gram_condition_finds_every_text_that_holds_the_value(postgres_store, rows):
    """Wherever the value stands in a text, its eight-character grams (all of them)
    beside the ``ILIKE`` answer what the ``ILIKE`` alone answers."""
    condition = distinct_text_contains(
        "x.text",
        "x.pattern",
        "x.value",
        grams="netmap_text_wide_grams(x.value)",
        grammed_by="netmap_text_wide_grams",
    )
    pairs = [
        (before + value + after if held else before + after + value[1:], value)
        for before, value, after, held in rows
    ]
    answers = text_condition_answers(condition, pairs)
    assert [indexed for _plain, indexed in answers] == [plain for plain, _indexed in answers]


def _chunks_by_alignment(conn, value: str) -> list[list[str]]:
    """Every chunk of ``value`` cut from each offset 0-4, sorted, one list per offset."""
    return (
        conn.execute(
            sa.text(
                "SELECT array_agg(c ORDER BY c) FROM generate_series(0, 4) AS a(part), "
                "unnest(netmap_text_chunks(substr(netmap_text_fold(:v), a.part + 1))) AS c "
                "GROUP BY a.part ORDER BY a.part"
            ),
            {"v": value},
        )
        .scalars()
        .all()
    )


def test_a_lookup_leaves_out_the_pieces_nearly_every_text_holds(postgres_store):
    with db.transaction() as conn:
        insert_host_texts(conn, 20_000)
        every = _chunks_by_alignment(conn, HOST)
        asked = particular_chunks(conn, CHUNKS, HOST)
    # Every host is host-0-….corp…: "stq0q" and "qcorp" are chunks of every text of one
    # banner (the banner's length sets the alignment); the address's are rare.
    assert len(asked) == len(every) == 5
    assert all(set(kept) <= set(chunks) for kept, chunks in zip(asked, every, strict=True))
    left_out = set().union(*every) - set().union(*asked)
    assert {"stq0q", "qcorp"} <= left_out
    assert not {"0q77q", "q77q7"} & left_out


def test_a_piece_a_few_texts_in_a_hundred_hold_is_asked_for_beside_a_rare_one(postgres_store):
    """Left out are only the pieces more than ``COMMON_PIECE_SHARE`` of the texts hold: one
    that a few percent hold (``.example`` after a given ``.corpN``) still cuts the texts a
    rare piece alone would leave to recheck."""
    value = "host-0-12-7.corp0.example"
    with db.transaction() as conn:
        insert_host_texts(conn, 20_000)
        shares = piece_shares(conn, "ix_search_asset_texts_chunks")
        asked = particular_chunks(conn, CHUNKS, value)
        every = _chunks_by_alignment(conn, value)
    limit = postgres_grams.COMMON_PIECE_SHARE
    assert asked is not None and len(asked) == len(every) == 5
    for kept, chunks in zip(asked, every, strict=True):
        assert kept == [c for c in chunks if shares.get(c, 0.0) <= limit]
    asked_shares = [shares.get(piece, 0.0) for kept in asked for piece in kept]
    assert any(0.01 < share <= limit for share in asked_shares)  # e.g. "0qexa", 3 %
    left_out = {c for chunks in every for c in chunks} - {p for kept in asked for p in kept}
    assert left_out and all(shares[piece] > limit for piece in left_out)


def test_without_statistics_or_with_only_common_pieces_every_piece_is_asked_for(postgres_store):
    with db.transaction() as conn:
        # Never analysed: no statistics name a common piece.
        assert particular_chunks(conn, CHUNKS, HOST) == [
            ["0q77q", "7qcor", "hostq"],
            ["ostq0", "q77q7", "qcorp"],
            ["77q7q", "stq0q"],
            ["7q7qc", "tq0q7"],
            ["q0q77", "q7qco"],
        ]
        insert_address_texts(conn, TABLE, 20_000)
        # Every value is 10.0.…: "10q0q" is in all of them, "0q0q1" in some two fifths
        # (10.0.1…, 10.0.1x…, 10.0.1xx…), both common. "10.0.1" has only those two, so
        # both are asked for; "10.0.77.7" has rare ones, and "10q0q" is left out.
        assert particular_grams(conn, GRAMS, "10.0.1") == ["0q0q1", "10q0q"]
        assert "10q0q" not in particular_grams(conn, GRAMS, "10.0.77.7")
    with db.transaction() as conn:
        # Too short for a chunk at every alignment, or for a gram: no pieces.
        assert particular_chunks(conn, CHUNKS, "host-0-7") is None
        assert particular_grams(conn, GRAMS, "ab.c") == []
        assert particular_grams(conn, WIDE_GRAMS, "10.0.77") == []


def test_a_rare_host_name_among_many_reads_a_fraction_of_the_trigram_pages(postgres_store):
    with db.transaction() as conn:
        insert_host_texts(conn, 100_000)
        for index in ("chunks", "wide_chunks", "fold_trgm"):
            conn.execute(sa.text(f"SELECT gin_clean_pending_list('ix_search_asset_texts_{index}')"))
        keys = matching_text_ids(conn, HOST)
        expected = (
            conn.execute(
                sa.text(f"SELECT CAST(id AS text) FROM {FREE} WHERE text LIKE :p"),
                {"p": f"%{HOST}%"},
            )
            .scalars()
            .all()
        )
        statement, params = text_lookup(conn, FREE, HOST, 1001)
        wide = _index_scans(conn, statement, params)
        chunks = _index_scans(conn, *chunk_lookup(conn, CHUNKS, HOST, 1001))
        trigrams = _index_scans(conn, MATCHING_TEXT_IDS[None], params)
    assert keys is not None and sorted(keys) == sorted(expected) and len(expected) == 1
    # Sixteen characters: the lookup reads the ten-character chunks.
    assert statement is MATCHING_TEXT_IDS[WIDE_CHUNKS]
    assert {scan["Index Name"] for scan in wide} == {"ix_search_asset_texts_wide_chunks"}
    assert {scan["Index Name"] for scan in chunks} == {"ix_search_asset_texts_chunks"}
    assert [scan["Index Name"] for scan in trigrams] == ["ix_search_asset_texts_fold_trgm"]
    wide_pages = sum(_pages(scan) for scan in wide)
    chunk_pages = sum(_pages(scan) for scan in chunks)
    # Both read a fraction of the trigram lists of "q0q", "77q"… (five alignments together).
    assert wide_pages * 5 <= _pages(trigrams[0]) and chunk_pages * 5 <= _pages(trigrams[0])
    # Ten characters are particular to the host: the wide chunks hand back only the text
    # that holds it, where five-character ones also hand back texts that share a piece
    # at each alignment (``0q77q`` of host-0-77-70…), each a heap page to recheck; the
    # number of those grows with the estate (docs/performance.md, "Rare host names").
    wide_found = sum(scan["Actual Rows"] for scan in wide)
    assert wide_found == len(expected) < sum(scan["Actual Rows"] for scan in chunks), (wide, chunks)


def test_free_text_finds_the_same_texts_whichever_index_the_value_picks(postgres_store):
    with db.transaction() as conn:
        insert_host_texts(conn, 20_000)
        for value in (HOST, "0-77-7.corp", "st-0-77-7", "nginx/1.24", "host-", "77-7", "-7."):
            assert by_pieces(FREE, value) == (len(value) >= 9)
            keys = matching_text_ids(conn, value)
            expected = (
                conn.execute(
                    sa.text(f"SELECT CAST(id AS text) FROM {FREE} WHERE text ILIKE :p"),
                    {"p": like_pattern(value)},
                )
                .scalars()
                .all()
            )
            if keys is None:  # more than the cap: left to the view's subquery
                assert len(expected) > 1000, value
            else:
                assert sorted(keys) == sorted(expected), value


def test_a_free_text_inside_the_search_language_is_looked_up_by_its_chunks(postgres_store):
    """``q=host-0-77-7.corp port:22`` names the matching texts outright, as a plain
    ``q=host-0-77-7.corp`` does, instead of a subquery through the trigram index."""
    with db.transaction() as conn:
        insert_host_texts(conn, 20_000)
        node = parse_query(f'"{HOST}" port:22').node
        found = matching_language_text_ids(conn, node)
        direct = matching_text_ids(conn, HOST)
        sql, params = language_condition(node, text_ids=found)
        none_sql, _ = language_condition(
            parse_query('"host-9-9-9.corp" port:22').node, text_ids={"host-9-9-9.corp": ()}
        )
    assert found == {HOST: direct} and direct is not None and len(direct) == 1
    assert "ANY(CAST(" in sql and "search_asset_texts" not in sql
    assert list(found[HOST]) in params.values()
    assert "(FALSE)" in none_sql


def test_a_process_reads_an_index_statistics_once_in_a_while(postgres_store, monkeypatch):
    """``pg_stats`` costs more than a lookup: each process keeps what it read of an index
    for ``STATISTICS_SECONDS`` (stale statistics cost pages, never answers)."""
    index = "ix_search_asset_texts_chunks"
    with db.transaction() as conn:
        assert piece_shares(conn, index) == {}  # never analysed; kept as read
        insert_host_texts(conn, 20_000)
        assert piece_shares(conn, index) == {}
        monkeypatch.setattr(postgres_statistics, "STATISTICS_SECONDS", 0.0)
        shares = piece_shares(conn, index)
    assert shares["qcorp"] > postgres_grams.COMMON_PIECE_SHARE
    assert "0q77q" not in shares  # the rare ones are below the statistics' list
