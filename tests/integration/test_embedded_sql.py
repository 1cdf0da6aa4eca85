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
