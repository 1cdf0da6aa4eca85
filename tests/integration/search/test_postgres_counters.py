"""The PostgreSQL store's per-execution counters (migration 0060) equal a recount.

The final batch reads these counters instead of counting rows, so they must be
exact under everything a scanner and the store do: replays, changed rewrites,
several months, several ports of one address, shards of any size, concurrent
writers of overlapping documents, and data written before the counters existed.
"""

from __future__ import annotations

import random
import threading
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory

from app import db, migrations
from app.db import normalise_url
from app.search.port import StorageScope
from app.search.postgres_store import PostgresStore
from tests.support.search_documents import at, execution_endpoint, fact
from tests.support.settings import make_settings

MONTHS = {
    "2026.10": datetime(2026, 10, 31, 23, 59, 59, tzinfo=UTC),
    "2026.11": datetime(2026, 11, 1, 0, 0, tzinfo=UTC),
    "2026.12": datetime(2026, 12, 15, 12, 0, tzinfo=UTC),
}
ALL_MONTHS = StorageScope(months=tuple(MONTHS))


def _recount(conn: sa.Connection, execution_id: int) -> dict[str, object]:
    """What the counters must say, counted from the rows themselves."""
    by_month = conn.execute(
        sa.text(
            "SELECT to_char(observed_at AT TIME ZONE 'UTC', 'YYYY.MM') AS month, kind, count(*) "
            "FROM search_facts WHERE execution_id = :e GROUP BY 1, 2"
        ),
        {"e": execution_id},
    ).all()
    endpoints, ips = conn.execute(
        sa.text(
            "SELECT count(*), count(DISTINCT ip) FROM search_execution_endpoints "
            "WHERE execution_id = :e"
        ),
        {"e": execution_id},
    ).one()
    return {
        "facts": {(m, k): n for m, k, n in by_month},
        "endpoints": endpoints,
        "ips": ips,
    }


def _counters(conn: sa.Connection, execution_id: int) -> dict[str, object]:
    facts = conn.execute(
        sa.text(
            "SELECT to_char(month, 'YYYY.MM'), kind, facts FROM search_execution_fact_counts "
            "WHERE execution_id = :e AND facts > 0"
        ),
        {"e": execution_id},
    ).all()
    row = conn.execute(
        sa.text(
            "SELECT endpoints, ips FROM search_execution_endpoint_counts WHERE execution_id = :e"
        ),
        {"e": execution_id},
    ).one_or_none()
    return {
        "facts": {(m, k): n for m, k, n in facts},
        "endpoints": row.endpoints if row else 0,
        "ips": row.ips if row else 0,
    }


def _assert_counters_exact(store: PostgresStore, execution_id: int, engine=None) -> None:
    with db.transaction(engine=engine) as conn:
        expected = _recount(conn, execution_id)
        assert _counters(conn, execution_id) == expected
    counts = store.count(ALL_MONTHS, execution_id)
    facts = expected["facts"]
    assert counts.observations == sum(n for (_m, k), n in facts.items() if k == "observation")
    assert counts.dns_records == sum(n for (_m, k), n in facts.items() if k == "dns_record")
    assert (counts.endpoints, counts.ips) == (expected["endpoints"], expected["ips"])


def _random_facts(rng: random.Random, execution_id: int, n: int) -> list:
    return [
        fact(
            execution_id,
            rng.randrange(40),
            batch_index=rng.randrange(3),
            observed_at=rng.choice(list(MONTHS.values())),
            kind=rng.choice(("observation", "observation", "dns_record")),
        )
        for _ in range(n)
    ]


def _random_endpoints(rng: random.Random, execution_id: int, n: int) -> list:
    return [
        execution_endpoint(
            execution_id,
            f"198.51.100.{rng.randrange(12)}",
            rng.choice((22, 80, 443)),
            rng.choice(("tcp", "udp")),
            seen=at(rng.randrange(100)),
            banner=f"b{rng.randrange(5)}",
        )
        for _ in range(n)
    ]


@pytest.mark.parametrize("seed", range(12))
def test_counters_equal_a_recount_after_random_writes(settings, engine, seed):
    """Replays, rewrites, shard sizes and duplicate ids within one call, in any order."""
    rng = random.Random(seed)
    store = PostgresStore(
        settings.replace(elasticsearch={"bulk_batch_size": rng.choice((1, 3, 50))})
    )
    execution_id = 500 + seed
    for _ in range(rng.randrange(3, 9)):
        if rng.random() < 0.5:
            assert store.write_facts(_random_facts(rng, execution_id, rng.randrange(1, 30))).ok
        else:
            docs = _random_endpoints(rng, execution_id, rng.randrange(1, 30))
            assert store.write_execution_endpoints(docs).ok
    # Another execution's writes never leak into this one's counters.
    assert store.write_facts(_random_facts(rng, execution_id + 1000, 10)).ok
    _assert_counters_exact(store, execution_id)
    _assert_counters_exact(store, execution_id + 1000)


def test_a_rewrite_with_other_content_overwrites_but_does_not_count(postgres_store):
    first = fact(7, 0, body={"ip": "192.0.2.1", "port": 80, "transport": "tcp", "state": "open"})
    changed = fact(7, 0, body={"ip": "192.0.2.1", "port": 80, "transport": "tcp", "state": "x"})
    assert [i.status for i in postgres_store.write_facts([first]).items] == [201]
    assert [i.status for i in postgres_store.write_facts([first]).items] == [200]
    assert [i.status for i in postgres_store.write_facts([changed]).items] == [200]
    with db.transaction() as conn:
        body = conn.execute(
            sa.text("SELECT body FROM search_facts WHERE execution_id = 7")
        ).scalar()
    assert body["state"] == "x"
    assert postgres_store.count(StorageScope(months=("2026.11",)), 7).observations == 1


def test_counts_sum_only_the_scope_months(postgres_store):
    docs = [fact(8, i, observed_at=moment) for i, moment in enumerate(MONTHS.values())]
    docs.append(fact(8, 9, observed_at=MONTHS["2026.11"], kind="dns_record"))
    assert postgres_store.write_facts(docs).ok
    november = postgres_store.count(StorageScope(months=("2026.11",)), 8)
    assert (november.observations, november.dns_records) == (1, 1)
    autumn = postgres_store.count(StorageScope(months=("2026.10", "2026.11")), 8)
    assert autumn.observations == 2
    legacy = postgres_store.count(StorageScope(legacy_full_history=True), 8)
    assert (legacy.observations, legacy.dns_records) == (3, 1)
    assert postgres_store.count(StorageScope(months=("2025.01",)), 8).observations == 0


def test_one_address_on_many_ports_counts_as_one_ip(postgres_store):
    docs = [execution_endpoint(9, "2001:db8::1", port) for port in range(1, 101)]
    docs += [execution_endpoint(9, "2001:0db8:0:0::1", 7, "udp")]  # same address, other spelling
    for shard in (docs[:40], docs[40:], docs):  # the last call replays everything
        assert postgres_store.write_execution_endpoints(shard).ok
    counts = postgres_store.count(ALL_MONTHS, 9)
    assert (counts.endpoints, counts.ips) == (101, 1)


def test_racing_writers_of_overlapping_documents_count_each_once(database_url, tmp_path, caplog):
    """Retries racing their originals: the same facts (some in two versions, so rewrites
    move counts between kinds), endpoints and addresses, from four writers at once."""
    settings = make_settings(
        database_url, tmp_path, elasticsearch={"bulk_batch_size": 7}, database={"pool_size": 8}
    )
    engine = db.create_engine(settings.database.url, settings.database)
    rng = random.Random(42)
    facts = _random_facts(rng, 11, 200)
    endpoints = _random_endpoints(rng, 11, 200)
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        store = PostgresStore(settings, engine=engine)
        mine = random.Random(n)
        try:
            barrier.wait()
            for _ in range(3):
                assert store.write_facts(mine.sample(facts, len(facts))).ok
                assert store.write_execution_endpoints(mine.sample(endpoints, len(endpoints))).ok
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        _assert_counters_exact(PostgresStore(settings, engine=engine), 11, engine)
        # Locks are taken in one global order, so no writer ever had to be retried.
        retries = [
            r for r in caplog.records if getattr(r, "netmap_event", "") == "SearchStoreRetry"
        ]
        assert [r.netmap_fields for r in retries] == []
    finally:
        engine.dispose()


def test_the_migration_backfills_counters_from_existing_rows(empty_database_url, tmp_path):
    script = ScriptDirectory.from_config(migrations.alembic_config())
    module = script.get_revision("20261130_0060").module
    migrations.upgrade(empty_database_url, "20261130_0050")
    engine = sa.create_engine(normalise_url(empty_database_url), poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(
                "CREATE TABLE search_facts_y2026m11 PARTITION OF search_facts "
                "FOR VALUES FROM ('2026-11-01+00') TO ('2026-12-01+00')"
            )
            conn.exec_driver_sql(
                "INSERT INTO search_facts (id, observed_at, kind, execution_id, task_id, "
                "owner_id, upload_id, stream, batch_index, position, body) "
                "SELECT gen_random_uuid(), '2026-11-30T06:00Z', "
                "CASE WHEN mod(g, 4) = 0 THEN 'dns_record' ELSE 'observation' END, "
                "3, 1, 1, 'u', 'main', 0, g, '{}' FROM generate_series(1, 20) g"
            )
            conn.exec_driver_sql(
                "INSERT INTO search_execution_endpoints (key, id, execution_id, task_id, ip, "
                "port, transport, first_seen, first_execution_id, last_seen, "
                "last_execution_id, observation_key) "
                "SELECT g, gen_random_uuid(), 3, 1, ('192.0.2.' || mod(g, 5))::inet, g, 'tcp', "
                "now(), 3, now(), 3, '' FROM generate_series(1, 30) g"
            )
        migrations.upgrade(empty_database_url)
        settings = make_settings(empty_database_url, tmp_path)
        store_engine = db.create_engine(settings.database.url, settings.database)
        try:
            counts = PostgresStore(settings, engine=store_engine).count(
                StorageScope(months=("2026.11",)), 3
            )
        finally:
            store_engine.dispose()
        assert (counts.observations, counts.dns_records, counts.endpoints, counts.ips) == (
            15,
            5,
            30,
            5,
        )
        with engine.begin() as conn:
            conn.exec_driver_sql(module.BACKFILL)  # re-running recounts, never adds twice
            assert _counters(conn, 3) == _recount(conn, 3)
        migrations.downgrade(empty_database_url, "20261130_0050")
        with engine.connect() as conn:
            assert (
                conn.execute(sa.text("SELECT to_regclass('search_execution_ips')")).scalar() is None
            )
    finally:
        engine.dispose()
