"""Alembic owns the schema (FND-3): idempotent upgrades and a working downgrade."""

from __future__ import annotations

import sqlalchemy as sa

from app import migrations
from app.db import normalise_url


def _tables(url: str) -> set[str]:
    engine = sa.create_engine(normalise_url(url), poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return set(sa.inspect(conn).get_table_names())
    finally:
        engine.dispose()


def test_upgrade_twice_is_a_no_op(empty_database_url):
    migrations.upgrade(empty_database_url)
    first = _tables(empty_database_url)
    migrations.upgrade(empty_database_url)
    assert _tables(empty_database_url) == first
    assert {"users", "scanners", "scan_tasks", "scan_executions", "search_targets"} <= first
    engine = sa.create_engine(normalise_url(empty_database_url), poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        assert migrations.is_at_head(conn)
    engine.dispose()


def test_initial_revision_downgrades_and_upgrades_again(empty_database_url):
    migrations.upgrade(empty_database_url, "20261130_0001")
    engine = sa.create_engine(normalise_url(empty_database_url), poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO users (username, password_hash) VALUES ('keep', 'x')"))
    migrations.upgrade(empty_database_url)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT username FROM users")).scalar() == "keep"
    migrations.downgrade(empty_database_url, "base")
    assert _tables(empty_database_url) <= {"alembic_version"}
    migrations.upgrade(empty_database_url)
    assert "scan_executions" in _tables(empty_database_url)
    engine.dispose()


def test_initial_revision_adopts_existing_objects(empty_database_url):
    """A database that already has the tables (IF NOT EXISTS DDL) migrates without loss."""
    migrations.upgrade(empty_database_url, "20261130_0001")
    engine = sa.create_engine(normalise_url(empty_database_url), poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO users (username, password_hash) VALUES ('old', 'x')"))
        conn.execute(sa.text("DELETE FROM alembic_version"))
    migrations.upgrade(empty_database_url)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM users")).scalar() == 1
    engine.dispose()


def test_cidr_targets_use_the_gist_index(database_url, engine):
    from app.db import transaction

    with transaction() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO users (username, password_hash) VALUES ('o', 'x');"
                "INSERT INTO search_targets (owner_id, kind, key) "
                "SELECT 1, 'cidr', format('10.%s.%s.0/24', a, b) "
                "FROM generate_series(0, 99) a, generate_series(0, 99) b;"
                "ANALYZE search_targets;"
            )
        )
        plan = "\n".join(
            conn.execute(
                sa.text(
                    "EXPLAIN SELECT key FROM search_targets "
                    "WHERE owner_id = 1 AND kind = 'cidr' AND target_ip >>= inet '10.5.6.7'"
                )
            ).scalars()
        )
    assert "ix_search_targets_cidr_gist" in plan
