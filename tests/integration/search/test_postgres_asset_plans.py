"""Address and text searches of the asset views on a realistic table (PRF-2, WEB-12).

The asset tables have no index on ``ip`` (migration 0160): an address or CIDR search
is a range of the ordering index ``ix_search_assets_*_order`` because the query also
bounds ``ip_order`` (``postgres_queries.ip_order_range``). These tests plan the
searches on tens of thousands of analysed rows, with the planner free to choose (no
``enable_*`` switches), and check the answers against ``ip <<= cidr`` / ``ip = address``
alone evaluated without any index, including the addresses where ``ip_order`` cannot
tell IPv4 ``a.b.c.d`` from IPv6 ``::ffff:a.b.c.d``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from app import db
from app.search import postgres_queries
from app.search.ids import normalise_ip
from app.search.port import AssetQuery
from app.search.postgres_grams import WIDE_CHUNKS
from app.search.postgres_queries import (
    MATCHING_TEXT_IDS,
    asset_search_statement,
    ip_order_range,
    matching_text_ids,
    text_lookup,
)
from app.search.postgres_store import PostgresStore
from tests.support.asset_search import seed_views, without_indexes
from tests.support.search_documents import at, current_asset
from tests.support.seeded import seeded_copies

SEEDED_OWNER, OTHER_OWNER = 5, 6
# Endpoint n of the seed is host 10.0.0.0 + n // 5 on one of five services.
SERVICES = (
    (22, "ssh", "OpenSSH", "9.6p1", "SSH-2.0-OpenSSH_9.6p1"),
    (80, "http", "nginx", "1.24.0", "HTTP/1.1 200 OK\r\nServer: nginx/1.24.0"),
    (443, "https", "nginx", "1.24.0", "HTTP/1.1 200 OK\r\nServer: nginx/1.24.0"),
    (3306, "mysql", "MySQL", "8.0.36", "8.0.36-0ubuntu0.22.04.1"),
    (8080, "http-proxy", "Apache Tomcat", "10.1", "HTTP/1.1 404\r\nServer: Apache-Coyote"),
)
SEEDED_ENDPOINTS = 30_000
# Addresses whose ip_order equals that of a seeded IPv4 host, and a few IPv6 blocks.
MAPPED = ("::ffff:10.0.1.5", "::ffff:10.0.1.6", "::ffff:10.0.200.1")
IPV6 = tuple(f"2001:db8:0:{block}::{host}" for block in (1, 2) for host in range(1, 40))
RARE_BANNER = "Server: quokka-httpd/0.9"


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)


def _plan(query: AssetQuery) -> dict[str, Any]:
    with db.transaction() as conn:
        # As the store asks: the matching texts first, then the view (matching_text_ids).
        text_ids = matching_text_ids(conn, query.text) if query.text else None
        sql, params = asset_search_statement(query, text_ids=text_ids)
        answer = conn.execute(sa.text("EXPLAIN (FORMAT JSON) " + sql), params).scalar_one()
    document = answer if isinstance(answer, list) else json.loads(answer)
    return document[0]["Plan"]


def _seed(store: PostgresStore) -> None:
    """30,000 seeded assets of one owner (and in the global view), another owner's few
    hundred published ones on the same and other addresses, all analysed."""
    seed_views(SEEDED_OWNER, SEEDED_ENDPOINTS, SERVICES, spread_minutes=1440)
    docs = []
    for ip in (*MAPPED, *IPV6, *(f"10.0.1.{n}" for n in range(1, 200))):
        owner_docs = [current_asset("user", ip, 443, owner_id=OTHER_OWNER, seen=at(5))]
        if ":" in ip:
            owner_docs.append(current_asset("global", ip, 443, seen=at(5), banner=RARE_BANNER))
        docs.extend(owner_docs)
    assert store.publish_current(docs, max_operations=1000, max_bytes=1 << 22).ok
    with db.transaction() as conn:
        conn.execute(sa.text("ANALYZE search_assets_global"))
        conn.execute(sa.text("ANALYZE search_assets_user"))
        conn.execute(sa.text("ANALYZE search_asset_texts"))


# Seeded and analysed once per module; each test that asks for ``realistic`` reads a copy.
seeded_template, database_url = seeded_copies(_seed, fixture="realistic")


@pytest.fixture
def realistic(postgres_store) -> None:
    """The estate ``_seed`` made (in this test's copy of the seeded database)."""


def _queries(**filters: Any) -> list[AssetQuery]:
    return [
        AssetQuery(scope="global", **filters),
        AssetQuery(scope="user", owner_id=SEEDED_OWNER, **filters),
        AssetQuery(scope="user", owner_id=OTHER_OWNER, **filters),
    ]


ADDRESS_FILTERS = [
    {"cidr": "10.0.1.0/24"},
    {"cidr": "10.0.1.4/31"},
    {"cidr": "10.0.0.0/8"},
    {"cidr": "::ffff:10.0.1.0/120"},
    {"cidr": "2001:db8:0:1::/64"},
    {"cidr": "192.0.2.0/24"},
    {"ip": "10.0.1.5"},
    {"ip": "::ffff:10.0.1.5"},
    {"ip": "2001:db8:0:2::7"},
]


def test_an_address_search_is_a_range_of_the_order_index(realistic):
    for query in (q for filters in ADDRESS_FILTERS for q in _queries(**filters)):
        plan = _plan(query)
        nodes = list(_nodes(plan))
        assert not [node for node in nodes if node["Node Type"] == "Seq Scan"], plan
        (scan,) = [node for node in nodes if node.get("Index Name")]
        assert scan["Index Name"] == f"ix_search_assets_{query.scope}_order", plan
        # The address bounds are where the scan starts and stops, not a filter per row.
        assert "ip_order" in scan["Index Cond"], scan
        if query.scope == "user":
            assert "owner_id" in scan["Index Cond"], scan


def test_a_sorted_block_search_is_estimated_at_its_size_and_read_in_sort_order(realistic):
    # 10.0.1.0/24 holds 1,280 of the seeded assets. Estimated at a tiny fraction of that,
    # a plan that sorts the whole block would look free next to reading a sort index.
    with db.transaction() as conn:
        skip_scan = int(conn.execute(sa.text("SHOW server_version_num")).scalar_one()) >= 180_000
    for sort in ("port", "service"):
        for query in _queries(cidr="10.0.1.0/24", sort=sort)[:2]:
            plan = _plan(query)
            scans = [node for node in _nodes(plan) if "Scan" in node["Node Type"]]
            assert scans[-1]["Plan Rows"] >= 1280 / 10, plan
            assert any("ip_order" in node.get("Index Cond", "") for node in scans), plan
            if skip_scan:
                # PostgreSQL 18 reads the block in sort order from the sort index.
                assert not any("Sort" in node["Node Type"] for node in _nodes(plan)), plan
                (scan,) = scans
                assert scan["Index Name"].endswith(("_port_ip", "_service_sort")), plan


def _all_pages(store, query: AssetQuery) -> list[tuple[str, int, str]]:
    found: list[tuple[str, int, str]] = []
    cursor = None
    while True:
        page = store.search_assets(dataclasses.replace(query, cursor=cursor))
        found.extend((item.ip, item.port, item.transport) for item in page.items)
        cursor = page.next_cursor
        if cursor is None:
            return found


def _rows_without_indexes(
    query: AssetQuery, condition: str, **params: Any
) -> list[tuple[str, int, str]]:
    """The open rows of the query's view that meet ``condition``, read with no index."""
    columns = "host(ip), port, transport"
    return without_indexes(query.scope, condition, query.owner_id, columns=columns, **params)


def _without_indexes(query: AssetQuery, condition: str, value: str) -> list[tuple[str, int, str]]:
    """The same search with only the ``ip`` condition and no index to answer it."""
    return _rows_without_indexes(query, f"ip {condition} CAST(:value AS inet)", value=value)


def test_an_address_search_answers_exactly_what_the_ip_condition_does(postgres_store, realistic):
    answered = 0
    for filters in ADDRESS_FILTERS:
        ((name, value),) = filters.items()
        for query in _queries(**filters, limit=500):
            expected = _without_indexes(query, "<<=" if name == "cidr" else "=", value)
            found = _all_pages(postgres_store, query)
            answered += len(found)
            assert found == [
                (normalise_ip(ip), port, transport) for ip, port, transport in expected
            ]
    # The 10.0.0.0/8 searches alone return every seeded asset of both views.
    assert answered > 2 * SEEDED_ENDPOINTS


def test_the_ipv4_mapped_twins_share_an_order_range_but_not_an_answer(postgres_store, realistic):
    # The range of a block holds both spellings; the ip condition keeps the asked one.
    v4 = _all_pages(postgres_store, AssetQuery(scope="user", owner_id=OTHER_OWNER, ip="10.0.1.5"))
    v6 = _all_pages(
        postgres_store, AssetQuery(scope="user", owner_id=OTHER_OWNER, ip="::ffff:10.0.1.5")
    )
    assert [ip for ip, _port, _transport in v4] == ["10.0.1.5"]
    assert [ip for ip, _port, _transport in v6] == ["::ffff:a00:105"]
    assert ip_order_range("10.0.1.0/24") == ("::ffff:10.0.1.0/120", "::ffff:10.0.1.255")
    assert ip_order_range("2001:db8::/32") == (
        "2001:db8::/32",
        "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff",
    )


@pytest.mark.parametrize(
    ("query", "view_index"),
    [
        (AssetQuery(scope="global", text="quokka-httpd"), "ix_search_assets_global_text"),
        (
            AssetQuery(scope="user", owner_id=SEEDED_OWNER, text="quokka-httpd"),
            "ix_search_assets_user_text",
        ),
    ],
)
def test_a_rare_text_is_found_through_the_texts_then_the_view_index(realistic, query, view_index):
    # Migration 0170: the matching texts come from search_asset_texts (six distinct texts
    # here, so the planner may read them whole; with many, the trigram index serves them,
    # see test_postgres_store), and the view is reached by its text key, never walked.
    plan = _plan(query)
    indexes = {node.get("Index Name") for node in _nodes(plan)}
    assert view_index in indexes, plan
    scanned = {
        node.get("Relation Name") for node in _nodes(plan) if "Seq Scan" in node["Node Type"]
    }
    assert scanned <= {"search_asset_texts"}, plan


def test_among_many_texts_the_matching_ones_come_from_the_chunk_index(postgres_store, realistic):
    # Texts accumulate over the views' history (a text whose assets changed stays); the
    # ones a search matches must still be found through an index: a value of fourteen or
    # more characters through the texts' ten-character chunks (migration 2600), of nine or
    # more through their five-character ones (migration 2400), a shorter one through the
    # folded text's trigrams (migration 1900).
    with db.transaction() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO search_asset_texts (id, text) "
                "SELECT md5(t)::uuid, t FROM (SELECT 'HTTP/1.1 200 OK Server: app-' || n || "
                "E'\\x1fproduct ' || n % 97 || E'\\x1fhost-' || n || '.example' AS t "
                "FROM generate_series(1, 200000) AS n) AS s ON CONFLICT (id) DO NOTHING"
            )
        )
        conn.execute(sa.text("ANALYZE search_asset_texts"))
        lookups = {
            value: text_lookup(conn, "search_asset_texts", value, 1001)
            for value in ("quokka-httpd", "okka", "Server: app-4242")
        }
        plans = {
            value: conn.execute(
                sa.text("EXPLAIN (FORMAT JSON) " + str(statement)), params
            ).scalar_one()
            for value, (statement, params) in lookups.items()
        }
    assert lookups["Server: app-4242"][0] is MATCHING_TEXT_IDS[WIDE_CHUNKS]
    for value, index in (
        ("quokka-httpd", "ix_search_asset_texts_chunks"),
        ("okka", "ix_search_asset_texts_fold_trgm"),
        ("Server: app-4242", "ix_search_asset_texts_wide_chunks"),
    ):
        document = plans[value] if isinstance(plans[value], list) else json.loads(plans[value])
        indexes = {node.get("Index Name") for node in _nodes(document[0]["Plan"])}
        assert index in indexes, document
    for query in _queries(text="quokka-httpd"):
        view = f"ix_search_assets_{query.scope}_text"
        assert view in {node.get("Index Name") for node in _nodes(_plan(query))}, query
    found = _all_pages(postgres_store, AssetQuery(scope="global", text="quokka-httpd"))
    assert len(found) == len(MAPPED) + len(IPV6)  # the global rows with the rare banner


def _ilike_without_indexes(query: AssetQuery, pattern: str) -> list[tuple[str, int, str]]:
    """The rows whose own text matches, read without any index or the texts table."""
    text = (
        "coalesce(banner, '') || E'\\x1f' || coalesce(product, '') || E'\\x1f' "
        "|| coalesce(hostname, '')"
    )
    rows = _rows_without_indexes(query, f"({text}) ILIKE :pattern", pattern=pattern)
    return [(normalise_ip(ip), port, transport) for ip, port, transport in rows]


TEXT_SEARCHES = {
    "quokka": "%quokka%",
    "NGINX/1.24": "%NGINX/1.24%",
    "openssh_9": "%openssh\\_9%",
    "200 OK": "%200 OK%",
    "Tomcat": "%Tomcat%",
    "zz-none": "%zz-none%",
}


@pytest.mark.parametrize("cap", [postgres_queries.TEXT_IDS_CAP, 1])
def test_a_text_search_answers_exactly_the_ilike_of_the_rows_as_texts_change(
    postgres_store, realistic, monkeypatch, cap
):
    # Migration 0170 moved the trigram index to the distinct texts: the answers must stay
    # the rows' own ILIKE, in both views, also after sightings changed their texts (the
    # update triggers add the new texts; the old ones stay in the table, matching nothing).
    # With a cap of 1, every search matching two texts or more takes the subquery form.
    monkeypatch.setattr(postgres_queries, "TEXT_IDS_CAP", cap)

    def check() -> int:
        answered = 0
        for text, pattern in TEXT_SEARCHES.items():
            for query in _queries(text=text, limit=500):
                expected = _ilike_without_indexes(query, pattern)
                assert _all_pages(postgres_store, query) == expected, query
                answered += len(expected)
        return answered

    assert check() > SEEDED_ENDPOINTS
    later = []
    for n, ip in enumerate(f"10.0.1.{n}" for n in range(1, 200)):
        banner = "Server: quokka-httpd/1.0" if n % 3 == 0 else "Server: wombat/2"
        later.append(
            current_asset("user", ip, 443, owner_id=OTHER_OWNER, seen=at(9), banner=banner)
        )
    for ip in IPV6[:10]:
        later.append(current_asset("global", ip, 443, seen=at(9), banner="Server: wombat/2"))
    assert postgres_store.publish_current(later, max_operations=1000, max_bytes=1 << 22).ok
    TEXT_SEARCHES["wombat"] = "%wombat%"
    try:
        assert check() > SEEDED_ENDPOINTS
        wombats = _all_pages(postgres_store, AssetQuery(scope="global", text="wombat"))
        assert len(wombats) == 10
    finally:
        del TEXT_SEARCHES["wombat"]
