"""Real PostgreSQL for the tests: one server per session, one fresh database per test.

The server is the one named by ``NETMAP_TEST_DATABASE_URL`` (any database on it;
we only need CREATE DATABASE rights) or, by default, an embedded server started
in a temporary directory with durability off (it is thrown away). A template
database is migrated once per session (and per xdist worker); each test gets a
copy made with ``CREATE DATABASE … TEMPLATE``, so tests may open several
connections and really commit (leases, SKIP LOCKED, triggers).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from app.db import normalise_url

TEST_DATABASE_ENV = "NETMAP_TEST_DATABASE_URL"

# Thrown-away data: durability buys nothing and costs seconds per test.
EMBEDDED_TEST_TUNING = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
}


@dataclass
class TestDatabaseServer:
    admin_url: str
    embedded: object | None = None
    server_version: int = 0

    def url_for(self, database: str) -> str:
        return (
            make_url(normalise_url(self.admin_url))
            .set(database=database)
            .render_as_string(hide_password=False)
        )

    def _admin_engine(self) -> sa.Engine:
        return sa.create_engine(
            normalise_url(self.admin_url), isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool
        )

    def execute(self, sql: str) -> None:
        engine = self._admin_engine()
        try:
            with engine.connect() as conn:
                conn.execute(sa.text(sql))
        finally:
            engine.dispose()

    def create_database(self, name: str, template: str | None = None) -> str:
        if template:
            strategy = " STRATEGY FILE_COPY" if self.server_version >= 150000 else ""
            self.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"{strategy}')
        else:
            self.execute(f'CREATE DATABASE "{name}"')
        return self.url_for(name)

    def drop_database(self, name: str) -> None:
        self.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def stop(self) -> None:
        if self.embedded is not None:
            self.embedded.stop()


def start_test_server(tmp_root: Path) -> TestDatabaseServer:
    url = os.environ.get(TEST_DATABASE_ENV)
    if url:
        server = TestDatabaseServer(admin_url=url)
    else:
        from app import embedded

        embedded_server = embedded.start(tmp_root, tuning=EMBEDDED_TEST_TUNING)
        # max_connections needs a restart; the other settings apply on reload.
        server = TestDatabaseServer(admin_url=embedded_server.admin_url, embedded=embedded_server)
    engine = server._admin_engine()
    try:
        with engine.connect() as conn:
            server.server_version = int(conn.execute(sa.text("SHOW server_version_num")).scalar())
    finally:
        engine.dispose()
    return server


def unique_name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


@contextlib.contextmanager
def engine_for(url: str) -> Iterator[sa.Engine]:
    """An engine on ``url`` that keeps no connection open (no pool), disposed after: for
    a test that works on a database beside the test's own (a migration's, a copy)."""
    engine = sa.create_engine(normalise_url(url), poolclass=sa.pool.NullPool)
    try:
        yield engine
    finally:
        engine.dispose()
