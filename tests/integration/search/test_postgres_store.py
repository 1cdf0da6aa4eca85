"""PostgreSQL adapter specifics: collisions, partitions, concurrency, query plans."""

from __future__ import annotations

import dataclasses
import threading
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from app import db
from app.search.documents import merge_all
from app.search.port import AssetQuery, StorageScope, StoreUnavailable
from app.search.postgres_queries import asset_search_statement, matching_text_ids
from app.search.postgres_schema import partition_name
from app.search.postgres_store import PostgresStore
from tests.support.search_documents import (
    at,
    current_asset,
    execution_endpoint,
    fact,
    forge_key_collision,
)
from tests.support.settings import make_settings
from tests.support.sql import counted_statements


def test_a_64_bit_key_collision_is_reported_not_merged(postgres_store, engine):
    doc = current_asset("user", "192.0.2.1", 80, owner_id=1, service="http", seen=at(0))
    forge_key_collision("search_assets_user", doc.id, ip="192.0.2.1", owner_id=1)
    result = postgres_store.publish_current([doc], max_operations=10, max_bytes=1 << 20)
    (item,) = result.items
    assert (item.status, item.error_type) == (409, "id_collision")
    with db.transaction() as conn:
        row = conn.execute(sa.text("SELECT owner_id, host(ip), port FROM search_assets_user")).one()
    assert tuple(row) == (1, "192.0.2.1", 9)  # the forged row, unmerged


def test_two_ids_sharing_a_key_in_one_batch(postgres_store):
    # The views' keys lead with the address, so ids meet only at one address.
    doc = current_asset("user", "192.0.2.1", 80, owner_id=1)
    twin = dataclasses.replace(doc, id=doc.id[:16] + "f" * 16)
    result = postgres_store.publish_current([doc, twin], max_operations=10, max_bytes=1 << 20)
    statuses = {i.id: i.status for i in result.items}
    assert sorted(statuses.values()) == [201, 409]


def test_execution_endpoints_sharing_a_64_bit_key_are_both_written(postgres_store):
    # Their primary key ends with the whole id (migration 2100): no 64-bit key can meet.
    doc = execution_endpoint(5, "192.0.2.1", 80)
    twin = dataclasses.replace(execution_endpoint(5, "192.0.2.2", 80), id=doc.id[:16] + "f" * 16)
    first = postgres_store.write_execution_endpoints([doc, twin])
    assert [i.status for i in first.items] == [201, 201]
    again = postgres_store.write_execution_endpoints([doc, twin])  # the merge statement
    assert [i.status for i in again.items] == [200, 200]
    with db.transaction() as conn:
        stored = conn.execute(
            sa.text("SELECT count(*), count(DISTINCT key) FROM search_execution_endpoints")
        ).one()
    assert tuple(stored) == (2, 1)


def test_partitions_are_created_once_under_concurrent_writers(settings, engine):
    months = [datetime(2025, m, 3, tzinfo=UTC) for m in (1, 2, 3)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def writer(n: int) -> None:
        store = PostgresStore(settings)  # its own partition cache, like another process
        try:
            barrier.wait()
            facts = [fact(70 + n, i, observed_at=months[i % 3]) for i in range(30)]
            assert store.write_facts(facts).ok
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with db.transaction() as conn:
        names = conn.execute(
            sa.text(
                "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                "WHERE i.inhparent = 'search_facts'::regclass ORDER BY 1"
            )
        ).scalars()
        assert list(names) == [partition_name(m) for m in ("2025.01", "2025.02", "2025.03")]
    store = PostgresStore(settings)
    scope = StorageScope(months=("2025.01", "2025.02", "2025.03"))
    assert [store.count(scope, 70 + n).observations for n in range(4)] == [30] * 4


def test_ensure_partitions_recreates_what_its_cache_lacks(postgres_store):
    assert postgres_store.write_facts([fact(80, 0)]).ok
    with db.transaction() as conn:
        conn.execute(sa.text(f"DROP TABLE {partition_name('2026.11')}"))
    # A store that does not know the month (a fresh process) creates the partition again.
    postgres_store._known_partitions.clear()
    assert postgres_store.write_facts([fact(80, 1)]).ok


def test_concurrent_overlapping_merges_do_not_deadlock(settings, engine):
    versions = [
        [
            current_asset(
                "global", f"10.9.{n // 250}.{n % 250}", 80, seen=at(round_), banner=f"r{round_}"
            )
            for n in range(300)
        ]
        for round_ in range(6)
    ]
    errors: list[BaseException] = []

    def publisher(rounds: list[int], reverse: bool) -> None:
        store = PostgresStore(settings)
        try:
            for r in rounds:
                docs = list(reversed(versions[r])) if reverse else versions[r]
                assert store.publish_current(docs, max_operations=50, max_bytes=1 << 20).ok
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [
        threading.Thread(target=publisher, args=([0, 2, 4, 5], False)),
        threading.Thread(target=publisher, args=([5, 3, 1, 0], True)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    store = PostgresStore(settings)
    expected = {d.id: d for d in merge_all(d for v in versions for d in v)}
    stored = []
    cursor = None
    while True:
        page = store.search_assets(AssetQuery(scope="global", limit=500, cursor=cursor))
        stored += page.items
        cursor = page.next_cursor
        if not cursor:
            break
    assert {d.id: d for d in stored} == expected
    assert {d.banner for d in stored} == {"r5"}


def test_pool_timeout_becomes_store_unavailable(database_url, tmp_path):
    settings = make_settings(database_url, tmp_path, database={"pool_size": 1, "max_overflow": 0})
    settings = settings.replace(database={"pool_timeout_seconds": 0.1})
    engine = db.create_engine(settings.database.url, settings.database)
    store = PostgresStore(settings, engine=engine)
    try:
        with db.transaction(engine=engine):
            with pytest.raises(StoreUnavailable) as caught:
                store.count(StorageScope(months=("2026.11",)), 1)
        assert caught.value.retry_after == 2
    finally:
        engine.dispose()


def test_execution_endpoint_writes_are_one_statement_per_shard(postgres_store, engine):
    def endpoint_statements() -> list[str]:
        return [s for s in statements if "search_execution_endpoints" in s]

    docs = [execution_endpoint(90, f"192.0.2.{n}", 80) for n in range(1, 201)]
    with counted_statements(counts=lambda: True) as statements:
        result = postgres_store.write_execution_endpoints(docs)
    assert result.ok and len(result.items) == 200
    # bulk_batch_size is 1000 by default: 200 new endpoints are one COPY.
    assert [s.split(" (")[0] for s in endpoint_statements()] == ["COPY search_execution_endpoints"]
    assert result.requests == 1
    # Seen again, the shard's COPY is refused by the stored keys and undone, and one merge
    # statement writes it.
    with counted_statements(counts=lambda: True) as statements:
        again = postgres_store.write_execution_endpoints(docs)
    assert again.ok and {i.status for i in again.items} == {200}
    shapes = [" ".join(s.split())[:34] for s in endpoint_statements()]
    assert shapes == [
        "COPY search_execution_endpoints (k",
        "WITH merged AS ( INSERT INTO searc",
    ]


@pytest.mark.parametrize(
    ("query", "index"),
    [
        # No index on ip: an index range over ip_order (migration 0160), whichever index.
        (AssetQuery(scope="global", cidr="10.1.2.0/28"), "ip_order >= '::ffff:10.1.2.0/124'"),
        (AssetQuery(scope="global", ip="10.1.2.3"), "ip_order = '::ffff:10.1.2.3'"),
        (AssetQuery(scope="global", port=443), "ix_search_assets_global_port"),
        (AssetQuery(scope="global", service="HTTPS"), "ix_search_assets_global_service"),
        (AssetQuery(scope="global", product="nginx"), "ix_search_assets_global_product"),
        (AssetQuery(scope="global", text="nginx/1"), "ix_search_assets_global_text"),
        (AssetQuery(scope="global", last_seen_from=at(5000)), "ix_search_assets_global_last_seen"),
        (AssetQuery(scope="global", first_seen_to=at(-5)), "ix_search_assets_global_first_seen"),
        (
            AssetQuery(scope="user", owner_id=3, cidr="10.1.2.0/28"),
            "ip_order >= '::ffff:10.1.2.0/124'",
        ),
        (AssetQuery(scope="user", owner_id=3, ip="10.1.2.3"), "ip_order = '::ffff:10.1.2.3'"),
        (AssetQuery(scope="user", owner_id=3, port=443), "ix_search_assets_user_port"),
    ],
)
def test_asset_filters_are_served_by_indexes(postgres_store, query, index):
    # Many rows, few matches: the plan must find them through the filter's index rather
    # than walk the ordering index.
    docs = []
    for n in range(3000):
        rare = n % 1000 == 7
        fields = {
            "first_seen": at(-10 if n == 7 else n),
            "last_seen": at(6000 if rare else n),
            "service": "https" if rare else "http",
            "product": "nginx" if rare else f"p{n}",
            "banner": "Server: nginx/1.22" if rare else f"banner {n}",
        }
        ip = f"10.1.{n // 250}.{n % 250}" if n != 7 else "10.1.2.3"
        for scope in ("global", "user"):
            docs.append(
                current_asset(scope, ip, 443 if rare else 80, owner_id=3 if n % 2 else 4, **fields)
            )
    assert postgres_store.publish_current(docs, max_operations=1000, max_bytes=1 << 22).ok
    with db.transaction() as conn:
        text_ids = matching_text_ids(conn, query.text) if query.text else None
        sql, params = asset_search_statement(query, text_ids=text_ids)
        # Small tables are cheaper to scan whole; the question here is whether an index
        # can serve the filter at all.
        conn.execute(sa.text("SET LOCAL enable_seqscan = off"))
        conn.execute(sa.text("ANALYZE search_assets_global"))
        conn.execute(sa.text("ANALYZE search_assets_user"))
        conn.execute(sa.text("ANALYZE search_asset_texts"))
        plan = "\n".join(conn.execute(sa.text("EXPLAIN " + sql), params).scalars())
    if index.startswith("ip_order"):
        conditions = [line for line in plan.splitlines() if "Index Cond:" in line]
        assert any(index in line for line in conditions), plan
    else:
        assert index in plan, plan


SORT_INDEXES = {
    "ip": "order",
    "port": "port_ip",
    "last_seen": "last_seen_ip",
    "service": "service_sort",
}


@pytest.mark.parametrize("order", ["asc", "desc"])
@pytest.mark.parametrize("sort", sorted(SORT_INDEXES))
def test_a_sorted_page_is_an_index_range_not_a_sort_of_the_view(postgres_store, sort, order):
    # WEB-12: every sort and order, in both views, first page and a page after a cursor,
    # reads its index in order from the position on. Sorting is disabled in the planner:
    # where no index delivers the order it must still plan a Sort, which fails the test.
    docs = []
    for n in range(1200):
        fields = {
            "service": (None, "http", "HTTP", "ssh")[n % 4],
            "seen": at(n % 7),
        }
        ip = f"10.2.{n // 250}.{n % 250}"
        for scope in ("global", "user"):
            docs.append(current_asset(scope, ip, (22, 80, 443)[n % 3], owner_id=3, **fields))
    assert postgres_store.publish_current(docs, max_operations=1000, max_bytes=1 << 22).ok
    for scope, owner_id in (("global", None), ("user", 3)):
        first = AssetQuery(scope=scope, owner_id=owner_id, sort=sort, order=order, limit=50)
        cursor = postgres_store.search_assets(first).next_cursor
        assert cursor
        for query in (first, dataclasses.replace(first, cursor=cursor)):
            sql, params = asset_search_statement(query)
            with db.transaction() as conn:
                conn.execute(sa.text("SET LOCAL enable_sort = off"))
                conn.execute(sa.text(f"ANALYZE search_assets_{scope}"))
                plan = "\n".join(conn.execute(sa.text("EXPLAIN " + sql), params).scalars())
            assert "Sort" not in plan, plan
            assert f"ix_search_assets_{scope}_{SORT_INDEXES[sort]}" in plan, plan
            assert ("Backward" in plan) == (order == "desc"), plan
            if query.cursor:
                # The keyset position is where the scan starts, not a filter on every row.
                conditions = [line for line in plan.splitlines() if "Index Cond:" in line]
                assert any("ROW(" in line for line in conditions), plan


def test_nul_characters_fail_only_their_item(postgres_store):
    good = execution_endpoint(95, "192.0.2.1", 80, banner="fine")
    bad = execution_endpoint(95, "192.0.2.2", 80, banner="bad\x00banner")
    bad_fact = fact(95, 1, body={"banner": "x\x00"})
    result = postgres_store.write_execution_endpoints([good, bad])
    assert [(i.id, i.status) for i in result.items] == [(good.id, 201), (bad.id, 400)]
    facts = postgres_store.write_facts([fact(95, 0), bad_fact])
    assert [i.status for i in facts.items] == [201, 400]
    assert "NUL" in (facts.items[1].error_reason or "")
