"""The traffic migration applies, downgrades cleanly and applies again."""

from __future__ import annotations

import sqlalchemy as sa

from app import migrations
from app.db import normalise_url

TABLES = {
    "traffic_rollups",
    "traffic_domains",
    "traffic_files",
    "traffic_file_partials",
    "traffic_dirty_keys",
    "traffic_verified_days",
}


def _traffic_tables(url: str) -> set[str]:
    engine = sa.create_engine(normalise_url(url), poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            names = conn.execute(
                sa.text("SELECT tablename FROM pg_tables WHERE tablename LIKE 'traffic%'")
            ).scalars()
            return set(names)
    finally:
        engine.dispose()


def test_upgrade_downgrade_upgrade(empty_database_url):
    migrations.upgrade(empty_database_url, "20261130_0030")
    assert _traffic_tables(empty_database_url) == TABLES
    migrations.downgrade(empty_database_url, "20261130_0001")
    assert _traffic_tables(empty_database_url) == set()
    migrations.upgrade(empty_database_url, "20261130_0030")
    assert _traffic_tables(empty_database_url) == TABLES
