"""Migration 0160 drops the asset tables' inet GiST indexes on a populated database and
its downgrade builds them again, rows untouched either way (FND-3)."""

from __future__ import annotations

import sqlalchemy as sa

from app import migrations
from app.db import normalise_url
from app.search.seed import seed_current_assets
from tests.support.search_documents import at
from tests.support.sql import valid_indexes

BEFORE, REVISION = "20261130_0150", "20261130_0160"
GIST = {"ix_search_assets_global_ip_gist", "ix_search_assets_user_ip_gist"}
SERVICES = ((443, "https", "nginx", "1.24.0", "HTTP/1.1 200 OK\r\nServer: nginx/1.24.0"),)


def _state(conn: sa.Connection) -> tuple[set[str], dict[str, int]]:
    indexes = valid_indexes(conn, "search_assets_global", "search_assets_user")
    rows = {
        table: conn.execute(
            sa.text(f"SELECT count(*) FROM {table} WHERE ip <<= '10.0.0.0/24'")
        ).scalar_one()
        for table in ("search_assets_global", "search_assets_user")
    }
    return indexes, rows


def test_the_upgrade_drops_the_gist_indexes_of_populated_tables_and_downgrade_restores_them(
    empty_database_url,
):
    migrations.upgrade(empty_database_url, BEFORE)
    engine = sa.create_engine(normalise_url(empty_database_url), poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            seed_current_assets(
                conn, owner_id=1, execution_id=1, low=0, high=2000, seen=at(0), services=SERVICES
            )
        with engine.connect() as conn:
            indexes_before, rows_before = _state(conn)
        assert GIST <= indexes_before
        assert rows_before == {"search_assets_global": 256, "search_assets_user": 256}

        migrations.upgrade(empty_database_url, REVISION)
        with engine.connect() as conn:
            indexes, rows = _state(conn)
        assert indexes == indexes_before - GIST
        assert rows == rows_before

        migrations.downgrade(empty_database_url, BEFORE)
        with engine.connect() as conn:
            assert _state(conn) == (indexes_before, rows_before)
        migrations.upgrade(empty_database_url)
    finally:
        engine.dispose()
