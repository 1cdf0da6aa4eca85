"""Server-side projection pages on PostgreSQL: SQL ids equal Python ids, merges equal the rule."""

from __future__ import annotations

import dataclasses
import ipaddress

import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app import db
from app.search.documents import merge_all
from app.search.ids import current_asset_id, normalise_ip, pg_key
from app.search.postgres_pages import SELF_CHECK_ADDRESSES
from app.search.postgres_schema import TEXT_EXPRESSION, TEXT_ID_EXPRESSION
from tests.support.search_documents import (
    at,
    current_asset,
    execution_endpoint,
    forge_key_collision,
)

addresses = st.one_of(
    st.ip_addresses(v=4).map(str),
    st.ip_addresses(v=6).map(str),
    # IPv4-mapped and -compatible forms, where PostgreSQL and Python spell differently.
    st.ip_addresses(v=4).map(lambda a: f"::ffff:{a}"),
    st.ip_addresses(v=4).map(lambda a: f"::{a}"),
    st.integers(0, 2**32 - 1).map(lambda n: str(ipaddress.IPv6Address(n))),
    st.lists(st.sampled_from([0, 0, 0, 1, 0xFFFF, 0xDB8]), min_size=8, max_size=8).map(
        lambda words: str(ipaddress.IPv6Address(int("".join(f"{w:04x}" for w in words), 16)))
    ),
)


def test_the_self_check_addresses_agree(postgres_store):
    pages = postgres_store.server_pages()
    assert pages.available()
    found = pages.sql_ids(SELF_CHECK_ADDRESSES, port=443, transport="tcp", owner_id=7)
    assert [r["ip_text"] for r in found] == [normalise_ip(a) for a in SELF_CHECK_ADDRESSES]


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    ips=st.lists(addresses, min_size=1, max_size=60),
    port=st.integers(0, 65535),
    transport=st.sampled_from(["tcp", "udp", "sctp"]),
    owner=st.integers(1, 2**62),
)
def test_sql_ids_equal_python_ids(postgres_store, ips, port, transport, owner):
    found = postgres_store.server_pages().sql_ids(
        ips, port=port, transport=transport, owner_id=owner
    )
    for address, row in zip(ips, found, strict=True):
        ip = normalise_ip(address)
        global_id = current_asset_id("global", None, ip, port, transport)
        user_id = current_asset_id("user", owner, ip, port, transport)
        assert row["ip_text"] == ip, address
        assert (row["global_id"], row["global_key"]) == (global_id, pg_key(global_id)), address
        assert (row["user_id"], row["user_key"]) == (user_id, pg_key(user_id)), address


def _current_rows(table: str) -> dict[str, dict]:
    with db.transaction() as conn:
        rows = conn.execute(
            sa.text(
                f"SELECT key, replace(id::text, '-', '') AS id, host(ip) AS ip, port, transport, "
                f"first_seen, first_execution_id, last_seen, last_execution_id, observation_key, "
                f"state, service, product, version, banner, hostname, tags, details"
                f"{', owner_id' if table.endswith('user') else ''} FROM {table}"
            )
        ).all()
    return {r.id: dict(r._mapping) for r in rows}


def test_a_server_page_merges_exactly_like_publish_current(postgres_store, settings, engine):
    """Same execution documents through both paths (in two databases' worth of tables: we
    publish, snapshot, clear, publish the other way) give identical current assets."""
    older = [
        execution_endpoint(1, f"192.0.2.{n}", 80, owner_id=3, seen=at(10), service="http")
        for n in range(1, 8)
    ]
    newer = [
        execution_endpoint(2, f"192.0.2.{n}", 80, owner_id=3, seen=at(20 if n % 2 else 5))
        for n in range(1, 12)
    ] + [execution_endpoint(2, "::ffff:10.0.0.1", 22, owner_id=4, seen=at(1), banner="b")]
    postgres_store.write_execution_endpoints(older).raise_for_failures()
    postgres_store.write_execution_endpoints(newer).raise_for_failures()

    def as_current(doc, scope):
        return dataclasses.replace(
            doc,
            id=current_asset_id(scope, doc.owner_id, doc.ip, doc.port, doc.transport),
            scope=scope,
            owner_id=doc.owner_id if scope == "user" else None,
            execution_id=None,
            task_id=None,
        )

    # Generic path: Python documents.
    for docs in (older, newer):
        current = [as_current(d, s) for d in docs for s in ("global", "user")]
        postgres_store.publish_current(current, max_operations=5, max_bytes=1 << 20)
    expected = {t: _current_rows(t) for t in ("search_assets_global", "search_assets_user")}
    assert _texts_without_entry() == 0
    with db.transaction() as conn:
        conn.execute(
            sa.text("TRUNCATE search_assets_global, search_assets_user, search_asset_texts")
        )

    # Server path, pages of 4 in cursor order, executions in the same order.
    for execution_id in (1, 2):
        after = None
        while True:
            page = postgres_store.publish_execution_page(
                execution_id, after_id=after, limit=4, max_bytes=1 << 20
            )
            assert page is not None
            page.raise_for_failures()
            if page.endpoints == 0:
                break
            after = page.last_id
    assert {t: _current_rows(t) for t in expected} == expected
    # The views' texts reached search_asset_texts through the server pages too.
    assert _texts_without_entry() == 0
    # And both equal the documents' own merge rule.
    merged = merge_all(as_current(d, "global") for d in older + newer)
    assert {d.id: d.last_seen for d in merged} == {
        i: r["last_seen"] for i, r in expected["search_assets_global"].items()
    }


def _texts_without_entry() -> int:
    """View rows whose text is missing from search_asset_texts (migration 0170)."""
    with db.transaction() as conn:
        return sum(
            conn.execute(
                sa.text(
                    f"SELECT count(*) FROM {table} t WHERE NOT EXISTS (SELECT 1 FROM "
                    f"search_asset_texts x WHERE x.id = {TEXT_ID_EXPRESSION} "
                    f"AND x.text = {TEXT_EXPRESSION})"
                )
            ).scalar_one()
            for table in ("search_assets_global", "search_assets_user")
        )


def test_server_page_keyset_and_collisions(postgres_store, engine):
    docs = [execution_endpoint(5, f"198.51.100.{n}", 443, owner_id=2) for n in range(1, 6)]
    postgres_store.write_execution_endpoints(docs).raise_for_failures()
    victim = current_asset("global", "198.51.100.3", 443)
    forge_key_collision("search_assets_global", victim.id, ip="198.51.100.3")
    ordered = sorted(d.id for d in docs)
    first = postgres_store.publish_execution_page(5, after_id=None, limit=3, max_bytes=1 << 20)
    second = postgres_store.publish_execution_page(
        5, after_id=first.last_id, limit=3, max_bytes=1 << 20
    )
    assert (first.endpoints, first.last_id) == (3, ordered[2])
    assert (second.endpoints, second.last_id) == (2, ordered[4])
    pages = (first, second)
    failed = [item for page in pages for item in page.failed]
    assert [(f.id, f.status, f.error_type) for f in failed] == [(victim.id, 409, "id_collision")]
    assert sum(p.operations for p in pages) == 10
    assert sum(p.confirmed for p in pages) == 9
    empty = postgres_store.publish_execution_page(
        5, after_id=second.last_id, limit=3, max_bytes=1 << 20
    )
    assert (empty.endpoints, empty.last_id, empty.operations) == (0, second.last_id, 0)


def test_a_possibly_oversized_page_falls_back_to_the_generic_path(postgres_store, engine):
    big = execution_endpoint(6, "192.0.2.9", 25, owner_id=1, banner="x" * 20_000)
    postgres_store.write_execution_endpoints([big]).raise_for_failures()
    assert (
        postgres_store.publish_execution_page(6, after_id=None, limit=10, max_bytes=65_536) is None
    )
    assert _current_rows("search_assets_global") == {}
    page = postgres_store.publish_execution_page(6, after_id=None, limit=10, max_bytes=1 << 20)
    assert page is not None and page.ok and page.confirmed == 2


def test_a_page_split_into_concurrent_parts_equals_one_statement(settings, engine):
    from app.search.postgres_store import PostgresStore

    concurrent = PostgresStore(settings.replace(elasticsearch={"bulk_max_concurrency": 3}))
    single = PostgresStore(settings.replace(elasticsearch={"bulk_max_concurrency": 1}))
    try:
        docs = [
            execution_endpoint(8, f"10.0.{n // 250}.{n % 250}", 443, owner_id=1 + n % 4)
            for n in range(650)
        ]
        concurrent.write_execution_endpoints(docs).raise_for_failures()
        pages, after = [], None
        while True:
            page = concurrent.publish_execution_page(
                8, after_id=after, limit=400, max_bytes=1 << 20
            )
            pages.append(page)
            if page.endpoints == 0:
                break
            after = page.last_id
        ordered = sorted(d.id for d in docs)
        assert [(p.endpoints, p.last_id, p.requests) for p in pages] == [
            (400, ordered[399], 3),
            (250, ordered[-1], 3),
            (0, ordered[-1], 3),
        ]
        assert all(p.ok and p.confirmed == 2 * p.endpoints for p in pages)
        expected = {t: _current_rows(t) for t in ("search_assets_global", "search_assets_user")}
        with db.transaction() as conn:
            conn.execute(sa.text("TRUNCATE search_assets_global, search_assets_user"))
        for after in (None, ordered[399]):
            single.publish_execution_page(8, after_id=after, limit=400, max_bytes=1 << 20)
        assert {t: _current_rows(t) for t in expected} == expected
    finally:
        concurrent.close()
        single.close()


def test_a_disagreeing_id_spelling_disables_server_pages(postgres_store, monkeypatch, caplog):
    """Another Python could spell an address differently from our SQL: then the store says
    so once and leaves every page to the generic path instead of writing other ids."""
    import app.search.postgres_pages as pages_module

    caplog.set_level("WARNING", logger="netmap.events")
    monkeypatch.setattr(pages_module, "normalise_ip", lambda ip: normalise_ip(ip).upper())
    docs = [execution_endpoint(9, "2001:db8::a", 443, owner_id=1)]
    postgres_store.write_execution_endpoints(docs).raise_for_failures()
    assert (
        postgres_store.publish_execution_page(9, after_id=None, limit=10, max_bytes=1 << 20) is None
    )
    assert not postgres_store.server_pages().available()
    disabled = [
        r
        for r in caplog.records
        if getattr(r, "netmap_event", "") == "SearchStoreServerPagesDisabled"
    ]
    assert len(disabled) == 1 and disabled[0].netmap_fields["address"] == "2001:db8::1"
    assert _current_rows("search_assets_global") == {}
