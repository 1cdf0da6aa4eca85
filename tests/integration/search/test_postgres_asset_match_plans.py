"""An alert rule's search costs what the run's changes cost, whatever the estate holds.

Over 20,000 analysed assets (a fifth of them Tomcat's) and a change set of a quarter of
them, with the planner free to choose: told the change set is at most ``PER_ROW_MAX``
rows, ``asset_match`` finds each change's one asset through the ordering index and
tests that asset alone (a common word, a rare host name, a negation, a word beside a
port), never reading the owner's other assets nor the distinct texts; told more (or
nothing), it leaves the plan to the planner, and the store, reading the view's
statistics in the caller's transaction, tests a common word on each asset's own text
while a rare one is still looked up among the distinct texts. Every spelling answers
exactly what the search answers on the Assets page, for the changed endpoints.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app import db
from app.bench.store import SERVICES  # the benches' five services; Tomcat's is a fifth
from app.search.port import AssetQuery
from app.search.postgres_language import PER_ROW_MAX, asset_match
from app.search.postgres_schema import ASSET_TEXTS_TABLE
from app.search.postgres_store import PostgresStore
from app.search.query_language import parse_query
from tests.support import asset_search
from tests.support.plans import explain, nodes
from tests.support.seeded import seeded_copies

OWNER = 7
ENDPOINTS = 20_000
CHANGED = ENDPOINTS // 4
RARE_HOST, RARE_NAME = "10.0.3.7", "quokka-gw.example"
NOW = datetime(2026, 12, 2, tzinfo=UTC)
# A table of the caller's rows, as the analysis's change set gives them.
_CHANGES = "rule_test_changes"


def _seed(_store: PostgresStore) -> None:
    asset_search.seed_views(OWNER, ENDPOINTS, SERVICES)
    with db.transaction() as conn:
        conn.execute(
            sa.text(
                "UPDATE search_assets_user SET hostname = :name WHERE host(ip) = :ip AND port = 22"
            ),
            {"name": RARE_NAME, "ip": RARE_HOST},
        )
        # Every fourth endpoint by key (spread over the estate), and the rare host's.
        conn.execute(
            sa.text(
                f"CREATE TABLE {_CHANGES} AS SELECT ip, port, transport, 'changed' AS kind "
                "FROM search_assets_user WHERE owner_id = :o AND (key % 4 = 0 OR host(ip) = :ip)"
            ),
            {"o": OWNER, "ip": RARE_HOST},
        )
        conn.execute(sa.text(f"ANALYZE {_CHANGES}"))
    asset_search.analyse_views()


# Seeded and analysed once per module; each test that asks for ``changed`` reads a copy
# (the change table included, dropped with it).
seeded_template, database_url = seeded_copies(_seed, fixture="changed")


@pytest.fixture
def changed(postgres_store) -> None:
    """The estate and changes ``_seed`` made (in this test's copy of the seeded database)."""


def _statement(where: str, rows: int | None = CHANGED) -> tuple[str, dict[str, Any]]:
    condition, params = asset_match(
        parse_query(where, now=NOW).node, endpoint="x", status="t.status", rows=rows
    )
    sql = f"SELECT host(x.ip) AS ip, x.port FROM {_CHANGES} x WHERE {condition}"
    return sql, {**params, "owner_id": OWNER}


def _store_statement(store, conn, where: str, rows: int | None) -> tuple[str, dict[str, Any]]:
    """The store's spelling (``asset_match_sql``), which may read the view's statistics
    through ``conn``, the caller's connection."""
    condition, params = store.asset_match_sql(
        parse_query(where, now=NOW).node, endpoint="x", status="t.status", rows=rows, conn=conn
    )
    sql = f"SELECT host(x.ip) AS ip, x.port FROM {_CHANGES} x WHERE {condition}"
    return sql, {**params, "owner_id": OWNER}


def _matched(where: str, rows: int | None = CHANGED, store=None) -> list[tuple[str, int]]:
    with db.transaction() as conn:
        if store is None:
            sql, params = _statement(where, rows)
        else:
            sql, params = _store_statement(store, conn, where, rows)
        return sorted((r.ip, r.port) for r in conn.execute(sa.text(sql), params))


def _searched(store, where: str) -> list[tuple[str, int]]:
    """What the search finds on the Assets page, among the changed endpoints."""
    query = AssetQuery(scope="user", owner_id=OWNER, where=parse_query(where, now=NOW).node)
    with db.transaction() as conn:
        changes = {
            (r.ip, r.port)
            for r in conn.execute(sa.text(f"SELECT host(ip) AS ip, port FROM {_CHANGES}"))
        }
    return sorted(e for e in asset_search.every_page(store, query) if e in changes)


@pytest.mark.parametrize("where", ["tomcat", RARE_NAME, "-tomcat port:8080", "OpenSSH port:22"])
def test_each_change_reads_its_own_asset_only(postgres_store, changed, where):
    """However many the changes, the assets are read one per change through the ordering
    index (the EXISTS kept a subplan, never a join that reads the owner's every asset)
    and no distinct text is read: the work follows the changes, not the estate."""
    plan = explain(*_statement(where))
    shape = _shape(plan)
    relations = [n for n in nodes(plan) if "Relation Name" in n]
    assets = [n for n in relations if n["Relation Name"] == "search_assets_user"]
    assert assets, shape
    assert all(n["Node Type"] in ("Index Scan", "Index Only Scan") for n in assets), shape
    assert {id(n) for n in assets} <= {id(n) for n in _under_subplans(plan)}, shape
    assert not [n for n in relations if n["Relation Name"] == ASSET_TEXTS_TABLE], shape


def _under_subplans(plan: dict[str, Any], inside: bool = False) -> list[dict[str, Any]]:
    """The nodes run once per outer row: a SubPlan and everything below it."""
    inside = inside or plan.get("Parent Relationship") == "SubPlan"
    below = [n for child in plan.get("Plans", ()) for n in _under_subplans(child, inside)]
    return [plan, *below] if inside else below


def _shape(plan: dict[str, Any], depth: int = 0) -> str:
    """The plan's nodes, one line each, for a failure's message."""
    line = "  " * depth + " ".join(
        str(plan.get(k, "")) for k in ("Parent Relationship", "Node Type", "Relation Name")
    )
    return "\n".join([line, *(_shape(child, depth + 1) for child in plan.get("Plans", ()))])


@pytest.mark.parametrize("rows", [PER_ROW_MAX + 1, None])
def test_a_large_or_unknown_change_set_is_left_to_the_planner(rows):
    """A very large change set (an import) is cheaper joined than tested change by
    change: no fence, and free texts looked up among the distinct texts."""
    sql, _ = _statement("tomcat", rows)
    assert "OFFSET 0" not in sql
    assert ASSET_TEXTS_TABLE in sql
    assert _statement("tomcat", PER_ROW_MAX)[0].count("OFFSET 0") == 1


def test_a_large_change_set_tests_common_words_on_each_asset_own_text(postgres_store, changed):
    """Beyond ``PER_ROW_MAX`` (an import's change set) the planner may join the changes
    to the owner's assets; a word a fifth of the assets hold is then tested on each
    asset's own text (no distinct text read, no fence), as the Assets page's search
    tests it, while a rare host name beside it is still looked up among the texts."""
    with db.transaction() as conn:
        common_sql, common_params = _store_statement(
            postgres_store, conn, "tomcat", PER_ROW_MAX + 1
        )
        mixed_sql, _ = _store_statement(
            postgres_store, conn, f"tomcat OR {RARE_NAME}", PER_ROW_MAX + 1
        )
        small_sql, _ = _store_statement(postgres_store, conn, RARE_NAME, PER_ROW_MAX)
    assert ASSET_TEXTS_TABLE not in common_sql and "OFFSET 0" not in common_sql
    assert mixed_sql.count(ASSET_TEXTS_TABLE) == 1 and "OFFSET 0" not in mixed_sql
    # Within PER_ROW_MAX every text is the asset's own, whatever the statistics say.
    assert ASSET_TEXTS_TABLE not in small_sql and small_sql.count("OFFSET 0") == 1
    plan = explain(common_sql, common_params)
    relations = {n["Relation Name"] for n in nodes(plan) if "Relation Name" in n}
    assert ASSET_TEXTS_TABLE not in relations, _shape(plan)


def test_an_unanalysed_view_has_no_common_words(postgres_store):
    """With no statistics (a view never analysed) nothing is called common: every free
    text of a large change set is looked up among the distinct texts, as before."""
    with db.transaction() as conn:  # only spelled: no change table is read
        sql, _ = _store_statement(postgres_store, conn, "tomcat", PER_ROW_MAX + 1)
    assert ASSET_TEXTS_TABLE in sql


@pytest.mark.parametrize(
    ("where", "count"),
    [("tomcat", CHANGED // len(SERVICES)), (RARE_NAME, 1), ("wombat", 0)],
)
@pytest.mark.parametrize("rows", [CHANGED, None, "store"])
def test_a_rule_search_finds_what_the_search_finds_among_the_changes(
    postgres_store, changed, where, count, rows
):
    if rows == "store":  # beyond PER_ROW_MAX, common words told apart by the statistics
        found = _matched(where, PER_ROW_MAX + 1, store=postgres_store)
    else:
        found = _matched(where, rows)
    assert found == _searched(postgres_store, where)
    assert len(found) == pytest.approx(count, rel=0.1)


# Pieces of the estate's texts, cased at random, and conditions beside them.
_WORDS = st.sampled_from(
    ["tomcat", "nginx", "coyote", "openssh", "200 ok", "quokka", "gw.ex", "9.6p", "x", "port:22"]
)
_SEARCHES = st.lists(_WORDS.map(lambda w: w.upper() if len(w) % 2 else w), min_size=1, max_size=3)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(words=_SEARCHES, negate=st.booleans(), either=st.booleans())
def test_any_rule_search_finds_what_the_search_finds(
    postgres_store, changed, words, negate, either
):
    terms = [w if ":" in w else f'"{w}"' for w in words]
    if negate:
        terms[0] = "-" + terms[0]
    where = (" OR " if either else " ").join(terms)
    searched = _searched(postgres_store, where)
    assert _matched(where, CHANGED) == searched
    assert _matched(where, None) == searched
    assert _matched(where, PER_ROW_MAX + 1, store=postgres_store) == searched
