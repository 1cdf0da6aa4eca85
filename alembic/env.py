"""Alembic environment: runs migrations online against the configured database.

The URL comes from the caller (``netmap db upgrade`` sets ``sqlalchemy.url`` on
the Config object) or from ``NETMAP_DATABASE_URL``. Each migration runs in one
transaction (PostgreSQL DDL is transactional), so a failed upgrade leaves the
schema as it was.
"""

from __future__ import annotations

import os

import sqlalchemy as sa

from alembic import context
from app.db import normalise_url

config = context.config


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url") or os.environ.get("NETMAP_DATABASE_URL")
    if not url:
        raise RuntimeError(
            "no database URL: use `netmap db upgrade` (embedded server) or set NETMAP_DATABASE_URL"
        )
    return normalise_url(url)


def run_migrations_online() -> None:
    connectable = config.attributes.get("connection")
    if connectable is not None:
        context.configure(connection=connectable, transaction_per_migration=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = sa.create_engine(_url(), poolclass=sa.pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection, transaction_per_migration=True)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    raise RuntimeError("offline (SQL script) migrations are not supported; run them online")
run_migrations_online()
