"""Free texts a large share of the assets hold are tested on each row's own text.

Over 20,000 analysed assets (a fifth of them Tomcat's), with the planner free to choose:
the view's text statistics (migration 2500) put a common text near its real share and a
rare one near none (``app.search.postgres_text_share``); a common text is spelled as
the row's own text, which the planner estimates from the same statistics (so a first
page is read in page order, no probe of the distinct texts per row); a rare one is
still looked up among the distinct texts; and either spelling answers exactly what the
plain condition, evaluated with no index, answers.
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
from app.search import postgres_statistics
from app.search.port import AssetQuery
from app.search.postgres_queries import asset_search_statement
from app.search.postgres_schema import TEXT_EXPRESSION
from app.search.postgres_store import PostgresStore
from app.search.postgres_text_share import COMMON_TEXT_SHARE, common_texts, text_statistics
from app.search.query_language import parse_query
from tests.support import asset_search
from tests.support.plans import nodes
from tests.support.seeded import seeded_copies

OWNER = 7
ENDPOINTS = 20_000
TOMCATS = ENDPOINTS // len(SERVICES)
RARE_HOST, RARE_NAME = "10.0.3.7", "quokka-gw.example"


def _seed(_store: PostgresStore) -> None:
    asset_search.seed_views(OWNER, ENDPOINTS, SERVICES)
    with db.transaction() as conn:
        for table in ("search_assets_user", "search_assets_global"):
            conn.execute(
                sa.text(f"UPDATE {table} SET hostname = :name WHERE host(ip) = :ip AND port = 22"),
                {"name": RARE_NAME, "ip": RARE_HOST},
            )
    asset_search.analyse_views()


# Seeded and analysed once per module; each test that asks for ``estate`` reads a copy.
seeded_template, database_url = seeded_copies(_seed, fixture="estate")


@pytest.fixture
def estate(postgres_store, monkeypatch) -> None:
    """The estate ``_seed`` made (in this test's copy of the seeded database)."""
    # Each test reads the statistics as they are now, not as an earlier read kept them.
    monkeypatch.setattr(postgres_statistics, "STATISTICS_SECONDS", 0.0)


def _query(scope: str = "user", where: str | None = None, **extra: Any) -> AssetQuery:
    node = parse_query(where, now=datetime(2026, 12, 2, tzinfo=UTC)).node if where else None
    owner = {"owner_id": OWNER} if scope == "user" else {}
    return AssetQuery(scope=scope, where=node, **owner, **extra)


def _plain(scope: str, condition: str) -> list[tuple[str, int]]:
    return asset_search.without_indexes(scope, condition, OWNER)


@pytest.mark.parametrize("scope", ["user", "global"])
def test_the_statistics_put_a_text_near_its_share(postgres_store, estate, scope):
    with db.transaction() as conn:
        statistics = text_statistics(conn, f"search_assets_{scope}")
        common = common_texts(
            conn, f"search_assets_{scope}", {"tomcat", "Coyote", "quokka", RARE_NAME, "wombat"}
        )
    assert statistics is not None
    assert statistics.share_holding("tomcat") == pytest.approx(0.2, abs=0.05)
    assert statistics.share_holding("quokka") < COMMON_TEXT_SHARE
    assert statistics.share_holding("wombat") == 0.0
    assert common == {"tomcat", "Coyote"}


# (search, the plain condition over the row's own text it means)
COMMON_SEARCHES = [
    ("tomcat", f"{TEXT_EXPRESSION} ILIKE '%tomcat%'"),
    ("-tomcat", f"{TEXT_EXPRESSION} NOT ILIKE '%tomcat%'"),
    ("tomcat port:8080", f"{TEXT_EXPRESSION} ILIKE '%tomcat%' AND port = 8080"),
    ("tomcat port:22", "false"),  # a common text no row of the other condition holds
    ("Coyote OR OpenSSH", f"{TEXT_EXPRESSION} ILIKE ANY(ARRAY['%coyote%', '%openssh%'])"),
    ("tomcat net:10.0.3.0/24", f"{TEXT_EXPRESSION} ILIKE '%tomcat%' AND ip << '10.0.3.0/24'"),
]


@pytest.mark.parametrize("scope", ["user", "global"])
@pytest.mark.parametrize(("where", "plain"), COMMON_SEARCHES)
def test_a_common_text_is_tested_on_the_row_own_text(postgres_store, estate, scope, where, plain):
    sql, _ = asset_search.search_statement(_query(scope, where, limit=50))
    assert f"{TEXT_EXPRESSION} ILIKE" in sql
    assert "search_asset_texts" not in sql  # no probe of the distinct texts
    assert asset_search.every_page(postgres_store, _query(scope, where)) == _plain(scope, plain)


@pytest.mark.parametrize("scope", ["user", "global"])
def test_a_common_text_is_estimated_near_its_count_and_read_in_page_order(
    postgres_store, estate, scope
):
    """The search's own test names the statistics' expression: estimated from them, a
    common text is read in the order index and stops after a page. Estimated as an
    unknown expression (a handful of rows), the view would be read whole and sorted."""
    for query in (_query(scope, "tomcat", limit=50), _query(scope, text="TOMCAT", limit=50)):
        plan = asset_search.search_plan(query)
        scans = [n for n in nodes(plan) if "Scan" in n["Node Type"]]
        assert scans[-1]["Plan Rows"] >= TOMCATS / 10, plan
        assert not [n for n in nodes(plan) if n["Node Type"] == "Sort"], plan
    assert asset_search.every_page(postgres_store, _query(scope, text="TOMCAT")) == _plain(
        scope, f"{TEXT_EXPRESSION} ILIKE '%tomcat%'"
    )


@pytest.mark.parametrize("scope", ["user", "global"])
@pytest.mark.parametrize("where", ["quokka", RARE_NAME, "wombat"])
def test_a_rare_text_is_still_looked_up_among_the_distinct_texts(
    postgres_store, estate, scope, where
):
    sql, _ = asset_search.search_statement(_query(scope, where, limit=50))
    assert "search_asset_texts" in sql or "ANY(CAST(" in sql
    assert f"{TEXT_EXPRESSION} ILIKE" not in sql
    expected = [] if where == "wombat" else [(RARE_HOST, 22)]
    assert asset_search.every_page(postgres_store, _query(scope, where)) == expected


def test_before_the_views_are_analysed_every_text_is_looked_up(postgres_store, monkeypatch):
    monkeypatch.setattr(postgres_statistics, "STATISTICS_SECONDS", 0.0)
    asset_search.seed_views(OWNER, 50, SERVICES)
    with db.transaction() as conn:
        assert text_statistics(conn, "search_assets_user") is None
        assert common_texts(conn, "search_assets_user", {"tomcat"}) == frozenset()
    sql, _ = asset_search.search_statement(_query("user", "tomcat"))
    assert "search_asset_texts" in sql
    assert len(asset_search.every_page(postgres_store, _query("user", "tomcat"))) == 50 // len(
        SERVICES
    )


# Pieces of the estate's texts, cased at random: common words, rare names, both apart.
_WORDS = st.sampled_from(
    ["tomcat", "nginx", "coyote", "openssh", "ubuntu", "200 ok", "quokka", "gw.ex", "9.6p", "x"]
)
_SEARCHES = st.lists(_WORDS.map(lambda w: w.upper() if len(w) % 2 else w), min_size=1, max_size=3)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(words=_SEARCHES, negate=st.booleans())
def test_either_spelling_finds_the_same_assets(postgres_store, estate, words, negate):
    """Whatever the statistics choose, the search answers what the subquery of the
    distinct texts (every text looked up, as before migration 2500) answers."""
    where = " ".join(f"-{w!r}" if negate and n == 0 else repr(w) for n, w in enumerate(words))
    where = where.replace("'", '"')
    query = _query("user", where, limit=10_000)
    chosen = [(row.ip, row.port) for row in postgres_store.search_assets(query).items]
    sql, params = asset_search_statement(query)  # no lookups: every text a subquery
    with db.transaction() as conn:
        looked_up = [(r.ip, r.port) for r in conn.execute(sa.text(sql), params)]
    assert chosen == looked_up[: query.limit]  # the statement reads one row past the page
