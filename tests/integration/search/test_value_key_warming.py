"""The PostgreSQL store reads its value keys back into shared buffers (``ValueKeyWarming``).

Against the real server: without ``pg_prewarm`` the store says so (None) and changes
nothing; with it, each distinct-value table's primary key is read whole, and where the
server can evict single buffers (``pg_buffercache_evict``, PostgreSQL 17 and later) a
key pushed out of memory is found back in it, block for block.
"""

from __future__ import annotations

import sqlalchemy as sa

from app.bench.resident import value_keys_resident
from app.db import transaction
from app.search.port import Capability, value_key_warming
from app.search.postgres_store import PostgresStore

KEYS = ("search_asset_fact_texts_pkey", "search_asset_texts_pkey")
VALUES = 5000


def _fill_values() -> None:
    with transaction() as conn:
        for table in ("search_asset_fact_texts", "search_asset_texts"):
            conn.execute(
                sa.text(
                    f"INSERT INTO {table} (id, text) "
                    "SELECT md5('v' || g)::uuid, 'value ' || g FROM generate_series(1, :n) g"
                ),
                {"n": VALUES},
            )


def _blocks(key: str) -> int:
    with transaction() as conn:
        return int(
            conn.execute(
                sa.text("SELECT pg_relation_size(CAST(:key AS regclass)) / 8192"), {"key": key}
            ).scalar_one()
        )


def _create(extension: str) -> None:
    with transaction() as conn:
        conn.execute(sa.text(f"CREATE EXTENSION IF NOT EXISTS {extension}"))


def test_the_postgres_store_declares_it(settings, engine):
    store = PostgresStore(settings)
    assert Capability.VALUE_KEY_WARMING in store.capabilities
    assert value_key_warming(store) is store


def test_without_pg_prewarm_nothing_is_warmed(settings, engine):
    _fill_values()
    with transaction() as conn:
        installed = conn.execute(
            sa.text("SELECT count(*) FROM pg_extension WHERE extname = 'pg_prewarm'")
        ).scalar_one()
    assert installed == 0  # a test database is made from the migrations alone
    assert PostgresStore(settings).warm_value_keys() is None


def test_each_value_key_is_read_whole(settings, engine):
    _fill_values()
    _create("pg_prewarm")
    warmed = PostgresStore(settings).warm_value_keys()
    assert warmed == {key: _blocks(key) for key in KEYS}
    assert all(blocks > 10 for blocks in warmed.values())  # more than a root and a leaf


def test_a_key_pushed_out_of_memory_is_back_after_warming(settings, engine):
    _fill_values()
    _create("pg_prewarm")
    _create("pg_buffercache")
    with transaction() as conn:
        evicts = conn.execute(
            sa.text("SELECT count(*) FROM pg_proc WHERE proname = 'pg_buffercache_evict'")
        ).scalar_one()
        for key in KEYS if evicts else ():
            conn.execute(
                sa.text(
                    """
                    SELECT pg_buffercache_evict(b.bufferid) FROM pg_buffercache b
                     WHERE b.relfilenode = pg_relation_filenode(CAST(:key AS regclass))
                       AND b.reldatabase = (SELECT oid FROM pg_database
                                             WHERE datname = current_database())
                    """
                ),
                {"key": key},
            )
    before = value_keys_resident()
    if evicts:
        assert {key: before[key]["resident"] for key in KEYS} == dict.fromkeys(KEYS, 0)
    PostgresStore(settings).warm_value_keys()
    after = value_keys_resident()
    assert after == {key: {"blocks": _blocks(key), "resident": _blocks(key)} for key in KEYS}
