"""Alembic owns the schema (FND-3): idempotent upgrades and a working downgrade."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from app import migrations
from tests.support.database import engine_for


def _tables(url: str) -> set[str]:
    with engine_for(url) as engine, engine.connect() as conn:
        return set(sa.inspect(conn).get_table_names())


def test_upgrade_twice_is_a_no_op(empty_database_url):
    migrations.upgrade(empty_database_url)
    first = _tables(empty_database_url)
    migrations.upgrade(empty_database_url)
    assert _tables(empty_database_url) == first
    assert {"users", "scanners", "scan_tasks", "scan_executions", "search_targets"} <= first
    with engine_for(empty_database_url) as engine, engine.connect() as conn:
        assert migrations.is_at_head(conn)


def test_initial_revision_downgrades_and_upgrades_again(empty_database_url):
    migrations.upgrade(empty_database_url, "20261130_0001")
    with engine_for(empty_database_url) as engine:
        with engine.begin() as conn:
            conn.execute(
                sa.text("INSERT INTO users (username, password_hash) VALUES ('keep', 'x')")
            )
        migrations.upgrade(empty_database_url)
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT username FROM users")).scalar() == "keep"
    migrations.downgrade(empty_database_url, "base")
    assert _tables(empty_database_url) <= {"alembic_version"}
    migrations.upgrade(empty_database_url)
    assert "scan_executions" in _tables(empty_database_url)


def test_an_unrecorded_existing_schema_stops_the_upgrade(empty_database_url):
    """Objects without the matching Alembic revision are drift: the upgrade names the first
    one and changes nothing, instead of adopting it silently."""
    migrations.upgrade(empty_database_url, "20261130_0001")
    with engine_for(empty_database_url) as engine:
        with engine.begin() as conn:
            conn.execute(sa.text("INSERT INTO users (username, password_hash) VALUES ('old', 'x')"))
            conn.execute(sa.text("DELETE FROM alembic_version"))
        with pytest.raises(sa.exc.ProgrammingError, match="already exists"):
            migrations.upgrade(empty_database_url)
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM users")).scalar() == 1
            assert migrations.current_revisions(conn) == set()


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


SCHEMA_CATALOG_QUERIES = {
    "relations": """
        SELECT c.relname, c.relkind::text, c.relpersistence::text
          FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = 'public' ORDER BY 1""",
    "columns": """
        SELECT table_name, column_name, ordinal_position, data_type, is_nullable,
               coalesce(column_default, ''), is_identity, is_generated,
               coalesce(generation_expression, '')
          FROM information_schema.columns WHERE table_schema = 'public' ORDER BY 1, 2""",
    "constraints": """
        SELECT t.relname, c.conname, pg_get_constraintdef(c.oid)
          FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid
          JOIN pg_namespace n ON n.oid = t.relnamespace
         WHERE n.nspname = 'public' ORDER BY 1, 2""",
    "indexes": "SELECT tablename, indexname, indexdef FROM pg_indexes "
    "WHERE schemaname = 'public' ORDER BY 1, 2",
    "triggers": """
        SELECT c.relname, t.tgname, pg_get_triggerdef(t.oid)
          FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
          JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = 'public' AND NOT t.tgisinternal ORDER BY 1, 2""",
    "functions": """
        SELECT p.proname, pg_get_function_identity_arguments(p.oid), pg_get_functiondef(p.oid)
          FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
          LEFT JOIN pg_depend d ON d.objid = p.oid AND d.deptype = 'e'
         WHERE n.nspname = 'public' AND d.objid IS NULL ORDER BY 1, 2""",
    "partitions": """
        SELECT c.relname, pg_get_expr(c.relpartbound, c.oid)
          FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = 'public' AND c.relispartition ORDER BY 1""",
    "extensions": "SELECT extname FROM pg_extension ORDER BY 1",
}


def _schema(url: str) -> dict[str, list[tuple]]:
    with engine_for(url) as engine, engine.connect() as conn:
        return {
            name: [tuple(row) for row in conn.execute(sa.text(sql))]
            for name, sql in SCHEMA_CATALOG_QUERIES.items()
        }


def test_downgrade_to_base_and_upgrade_again_gives_the_same_schema(
    database_url, empty_database_url
):
    """Every downgrade removes exactly what its upgrade made: a full round trip ends in the
    schema a fresh `upgrade head` builds (tables, columns, constraints, indexes, triggers,
    functions, partitions), so no migration hides a leftover behind IF NOT EXISTS."""
    fresh = _schema(database_url)  # the session template, migrated once to head
    assert {"users", "scan_executions", "search_facts"} <= {r[0] for r in fresh["relations"]}
    migrations.upgrade(empty_database_url)
    migrations.downgrade(empty_database_url, "base")
    after_downgrade = _schema(empty_database_url)
    assert {r[0] for r in after_downgrade["relations"]} <= {
        "alembic_version",
        "alembic_version_pkc",
    }
    migrations.upgrade(empty_database_url)
    again = _schema(empty_database_url)
    for name in SCHEMA_CATALOG_QUERIES:
        assert again[name] == fresh[name], name


def test_execution_endpoints_rekeyed_by_id_keep_rows_and_restart_sweeps(empty_database_url):
    """Migration 2100: the execution endpoints' key becomes (execution_id, id) with every
    row kept, the separate id index goes, and an asset sweep in progress (its cursor in
    the old key's order) starts its task again; finished purges keep theirs."""
    migrations.upgrade(empty_database_url, "20261204_2000")
    with engine_for(empty_database_url) as engine:
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO search_execution_endpoints (key, id, execution_id, task_id, ip,"
                    " port, transport, first_seen, first_execution_id, last_seen,"
                    " last_execution_id, observation_key)"
                    " SELECT n, md5(n::text)::uuid, 7, 3, '192.0.2.1', n, 'tcp', now(), 7,"
                    " now(), 7, 'k' FROM generate_series(1, 50) AS n"
                )
            )
            conn.execute(
                sa.text(
                    "INSERT INTO task_purges (task_id, owner_id, status, phase, cursor) VALUES"
                    " (1, 1, 'running', 'assets', -5), (2, 1, 'done', 'assets', 9),"
                    " (3, 1, 'queued', 'executions', 4)"
                )
            )
        migrations.upgrade(empty_database_url)
        with engine.begin() as conn:
            rows = conn.execute(
                sa.text("SELECT count(*) FROM search_execution_endpoints WHERE execution_id = 7")
            ).scalar_one()
            key = conn.execute(
                sa.text(
                    "SELECT pg_get_indexdef(indexrelid) FROM pg_index"
                    " WHERE indrelid = 'search_execution_endpoints'::regclass AND indisprimary"
                )
            ).scalar_one()
            indexes = (
                conn.execute(
                    sa.text(
                        "SELECT indexname FROM pg_indexes"
                        " WHERE tablename = 'search_execution_endpoints'"
                    )
                )
                .scalars()
                .all()
            )
            cursors = dict(
                conn.execute(sa.text("SELECT task_id, cursor FROM task_purges ORDER BY 1")).all()
            )
    assert rows == 50
    assert key.endswith("(execution_id, id)")
    assert "ix_search_execution_endpoints_execution_id_id" not in set(indexes)
    assert cursors == {1: None, 2: 9, 3: 4}
