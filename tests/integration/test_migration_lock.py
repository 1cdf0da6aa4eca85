"""Racing upgrades and migration timeouts (issue 20, the release phase; FND-3).

Several release phases of one deploy may run `netmap db upgrade` at once. The
upgrade holds a session advisory lock, so the second one waits and then finds
the schema at head. The tests hold the lock themselves first so that both
processes are provably waiting on it before they race; an upgrade that took no
lock would never wait and the test would time out.
"""

from __future__ import annotations

import subprocess

import pytest
import sqlalchemy as sa

from app import migrations
from app.db import normalise_url
from tests.support.processes import PROJECT_ROOT, base_env, netmap_command, wait_for


def _engine(url: str) -> sa.Engine:
    return sa.create_engine(normalise_url(url), poolclass=sa.pool.NullPool)


def _waiting_on_migration_lock(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return conn.execute(
            sa.text(
                "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
                "WHERE l.locktype = 'advisory' AND NOT l.granted "
                "AND d.datname = current_database() "
                "AND ((l.classid::bigint << 32) | l.objid::bigint) = :key"
            ),
            {"key": migrations.MIGRATION_LOCK_KEY},
        ).scalar_one()


def test_two_racing_upgrades_both_succeed_and_migrate_once(empty_database_url, tmp_path):
    engine = _engine(empty_database_url)
    env = base_env(NETMAP_DATABASE_URL=empty_database_url)
    holder = engine.connect()
    processes: list[subprocess.Popen] = []
    try:
        holder.execute(sa.text("SELECT pg_advisory_lock(:k)"), {"k": migrations.MIGRATION_LOCK_KEY})
        holder.commit()
        for name in ("first", "second"):
            processes.append(
                subprocess.Popen(
                    netmap_command("db", "upgrade"),
                    env=env,
                    cwd=PROJECT_ROOT,
                    stdout=open(tmp_path / f"{name}.out", "wb"),  # closed when the process exits
                    stderr=open(tmp_path / f"{name}.err", "wb"),
                )
            )
        wait_for(lambda: _waiting_on_migration_lock(engine) == 2, 90, "both upgrades to wait")
        holder.execute(
            sa.text("SELECT pg_advisory_unlock(:k)"), {"k": migrations.MIGRATION_LOCK_KEY}
        )
        holder.commit()
        codes = [p.wait(timeout=180) for p in processes]
    finally:
        holder.close()
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    errors = [(tmp_path / f"{n}.err").read_text()[-2000:] for n in ("first", "second")]
    assert codes == [0, 0], errors
    with engine.connect() as conn:
        assert migrations.is_at_head(conn)
        assert conn.execute(sa.text("SELECT count(*) FROM alembic_version")).scalar_one() == 1
        # The lock is released when the upgrade ends, not held by a leftover session.
        assert conn.execute(
            sa.text("SELECT pg_try_advisory_lock(:k)"), {"k": migrations.MIGRATION_LOCK_KEY}
        ).scalar_one()
    engine.dispose()


def test_a_migration_blocked_by_a_table_lock_fails_fast(database_url):
    """lock_timeout during migrations: a migration queued behind a long transaction gives up
    instead of making every request wait behind its own exclusive-lock request."""
    counters_revision = "20261130_0060"  # its downgrade drops search_execution_endpoint_counts
    migrations.downgrade(database_url, counters_revision)  # later revisions out of the way
    engine = _engine(database_url)
    blocker = engine.connect()
    try:
        # A reader inside a long transaction holds the table the downgrade must drop.
        blocker.execute(sa.text("SELECT count(*) FROM search_execution_endpoint_counts"))
        with pytest.raises(sa.exc.OperationalError, match="lock timeout"):
            migrations.downgrade(
                database_url,
                "20261130_0050",
                migrations.MigrationTimeouts(lock_timeout_ms=200, statement_timeout_ms=60_000),
            )
    finally:
        blocker.rollback()
        blocker.close()
    with engine.connect() as conn:
        # The failed step rolled back, and the advisory lock was released with it.
        assert migrations.current_revisions(conn) == {counters_revision}
        assert conn.execute(
            sa.text("SELECT pg_try_advisory_lock(:k)"), {"k": migrations.MIGRATION_LOCK_KEY}
        ).scalar_one()
    engine.dispose()


def test_schema_check_names_the_command(empty_database_url, database_url):
    with pytest.raises(migrations.SchemaNotCurrent, match="run `netmap db upgrade` first"):
        migrations.require_schema_at_head(empty_database_url)
    migrations.require_schema_at_head(database_url)


def test_web_app_refuses_an_unmigrated_database(empty_database_url, tmp_path):
    from app import create_app
    from tests.support.settings import make_settings

    settings = make_settings(empty_database_url, tmp_path)
    with pytest.raises(migrations.SchemaNotCurrent, match="netmap db upgrade"):
        create_app(settings, modules="off")
