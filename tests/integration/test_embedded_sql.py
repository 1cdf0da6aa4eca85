"""The embedded server's set-up SQL quotes what it splices in (database name, settings)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from app.db import normalise_url


def _engine(url: str) -> sa.Engine:
    return sa.create_engine(normalise_url(url), poolclass=sa.pool.NullPool)


def test_embedded_helper_quotes_database_names_and_settings(pg_server):
    """app/embedded.py splices a database name and ALTER SYSTEM values into SQL: both are
    quoted by the driver, so a name with quotes is one name and a value is one value."""
    from app import embedded

    name = 'netmap "quoted" name'
    try:
        assert embedded._ensure_database(pg_server.admin_url, name, {}) is False
        engine = _engine(pg_server.admin_url)
        with engine.connect() as conn:
            assert (
                conn.execute(
                    sa.text("SELECT count(*) FROM pg_database WHERE datname = :n"), {"n": name}
                ).scalar_one()
                == 1
            )
        engine.dispose()
    finally:
        pg_server.execute(f'DROP DATABASE IF EXISTS "{name.replace(chr(34), chr(34) * 2)}"')
    if pg_server.embedded is None:
        return  # ALTER SYSTEM needs the superuser the embedded server gives us
    # One literal: PostgreSQL rejects the whole text as a work_mem value, nothing else runs.
    import psycopg2

    with pytest.raises(psycopg2.errors.InvalidParameterValue, match="work_mem"):
        embedded._ensure_database(
            pg_server.admin_url, "postgres", {"work_mem": "4MB'; ALTER SYSTEM SET fsync = 'on"}
        )


def test_embedded_server_preloads_both_libraries_and_creates_their_extensions(pg_server):
    """shared_preload_libraries is a list: each library is its own literal, the server's
    ``a, b`` spelling counts as the same list (no restart asked for at every start), and
    the netmap database has both extensions (slow SQL, value-key warming)."""
    from app import embedded

    if pg_server.embedded is None:
        return  # an external server's libraries are its administrator's
    engine = _engine(pg_server.admin_url)
    with engine.connect() as conn:
        preload = conn.execute(sa.text("SHOW shared_preload_libraries")).scalar_one()
    engine.dispose()
    assert [item.strip() for item in preload.split(",")] == ["pg_stat_statements", "pg_prewarm"]
    pending = embedded._ensure_database(pg_server.admin_url, "postgres", embedded.PRELOAD_TUNING)
    assert pending is False
    engine = _engine(pg_server.embedded.url)
    with engine.connect() as conn:
        installed = set(conn.execute(sa.text("SELECT extname FROM pg_extension")).scalars())
    engine.dispose()
    assert {"pg_stat_statements", "pg_prewarm"} <= installed
