"""The search-store migration: re-runnable, reversible, keeps data on re-run (FND-3)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory

from app import migrations
from tests.support.database import engine_for

REVISION = "20261130_0010"
SEARCH_TABLES = {
    "search_facts",
    "search_execution_endpoints",
    "search_assets_global",
    "search_assets_user",
}


def _tables(url: str) -> set[str]:
    with engine_for(url) as engine, engine.connect() as conn:
        return set(
            conn.execute(
                sa.text("SELECT tablename FROM pg_tables WHERE tablename LIKE 'search_%'")
            ).scalars()
        )


def test_upgrade_is_idempotent_and_downgrade_reverses_it(empty_database_url):
    migrations.upgrade(empty_database_url)
    assert SEARCH_TABLES <= _tables(empty_database_url)

    script = ScriptDirectory.from_config(migrations.alembic_config())
    module = script.get_revision(REVISION).module
    with engine_for(empty_database_url) as engine:
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO search_assets_global (key, id, ip, port, transport, first_seen, "
                    "first_execution_id, last_seen, last_execution_id, observation_key) VALUES "
                    "(1, gen_random_uuid(), '192.0.2.1', 80, 'tcp', now(), 1, now(), 1, '')"
                )
            )
        # Re-running the DDL stops at the first existing object (drift is loud), data intact.
        with pytest.raises(sa.exc.ProgrammingError, match="already exists"):
            with engine.begin() as conn:
                conn.exec_driver_sql(module.UPGRADE)
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM search_assets_global")).scalar() == 1

    down = script.get_revision(REVISION).down_revision
    migrations.downgrade(empty_database_url, down)
    assert not (SEARCH_TABLES & _tables(empty_database_url))
    migrations.upgrade(empty_database_url)
    assert SEARCH_TABLES <= _tables(empty_database_url)
