"""Alembic environment: runs migrations online against the configured database.

The URL comes from the caller (``netmap db upgrade`` sets ``sqlalchemy.url`` on
the Config object) or from ``NETMAP_DATABASE_URL``. Each migration runs in one
transaction (PostgreSQL DDL is transactional), so a failed upgrade leaves the
schema as it was.

Racing upgrades (several release phases of one deploy, or a release next to an
operator) are serialised by a session-level advisory lock taken before Alembic
reads the current revision: the second process waits, then sees the schema at
head and applies nothing. The wait itself has no lock timeout (it is the point);
once the lock is held, every migration statement runs under ``lock_timeout`` and
``statement_timeout`` so a migration queued behind a long transaction fails fast
instead of blocking every request that queues behind it in turn.
"""

from __future__ import annotations

import os

import sqlalchemy as sa

from alembic import context
from app.db import normalise_url
from app.migrations import MIGRATION_LOCK_KEY, MigrationTimeouts

config = context.config


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url") or os.environ.get("NETMAP_DATABASE_URL")
    if not url:
        raise RuntimeError(
            "no database URL: use `netmap db upgrade` (embedded server) or set NETMAP_DATABASE_URL"
        )
    return normalise_url(url)


def _run_locked(connection: sa.Connection) -> None:
    timeouts = config.attributes.get("netmap.migration_timeouts") or MigrationTimeouts()
    if connection.in_transaction():
        connection.commit()
    # No timeout while waiting for another upgrade to finish; SET (not SET LOCAL) because
    # the settings must outlive this transaction and cover every per-migration transaction.
    connection.execute(sa.text("SET lock_timeout = 0"))
    connection.execute(sa.text("SET statement_timeout = 0"))
    connection.execute(sa.text("SELECT pg_advisory_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
    connection.execute(
        sa.text("SELECT set_config('lock_timeout', :v, false)"),
        {"v": f"{timeouts.lock_timeout_ms}ms"},
    )
    connection.execute(
        sa.text("SELECT set_config('statement_timeout', :v, false)"),
        {"v": f"{timeouts.statement_timeout_ms}ms"},
    )
    connection.commit()
    try:
        context.configure(connection=connection, transaction_per_migration=True)
        with context.begin_transaction():
            context.run_migrations()
        if connection.in_transaction():
            connection.commit()
    finally:
        if connection.in_transaction():
            connection.rollback()
        connection.execute(sa.text("SELECT pg_advisory_unlock(:key)"), {"key": MIGRATION_LOCK_KEY})
        connection.execute(sa.text("RESET lock_timeout"))
        connection.execute(sa.text("RESET statement_timeout"))
        connection.commit()


def run_migrations_online() -> None:
    connectable = config.attributes.get("connection")
    if connectable is not None:
        _run_locked(connectable)
        return
    engine = sa.create_engine(_url(), poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as connection:
            _run_locked(connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise RuntimeError("offline (SQL script) migrations are not supported; run them online")
run_migrations_online()
