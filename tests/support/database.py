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
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from app.db import normalise_url

TEST_DATABASE_ENV = "NETMAP_TEST_DATABASE_URL"

# Thrown-away data: durability buys nothing and costs seconds per test. The WAL is kept
# small because the data directory may be in memory (``scratch_directory``).
EMBEDDED_TEST_TUNING = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
    "max_wal_size": "256MB",
}

# Where the embedded test server keeps its data: a directory under this variable's value,
# else in memory (``RAM_DIRECTORY``) when it has room, else the system's temporary one.
# A database per test is a ``CREATE DATABASE … TEMPLATE`` per test, about a thousand files
# created and later deleted: in memory that takes a few hundredths of a second, on a disk
# file system it was half a second, most of a typical test's setup (docs/running.md).
TEST_DATA_ROOT_ENV = "NETMAP_TEST_DATA_ROOT"
RAM_DIRECTORY = Path("/dev/shm")  # noqa: S108 - mkdtemp makes a private directory in it
RAM_MIN_FREE_BYTES = 4 * 2**30  # a worker's server holds well under 1 GiB at its peak


def scratch_parent() -> str | None:
    """Where thrown-away servers' data goes (see ``TEST_DATA_ROOT_ENV``); None: the
    system's temporary directory."""
    given = os.environ.get(TEST_DATA_ROOT_ENV) or None
    if given is None and _has_room(RAM_DIRECTORY):
        return str(RAM_DIRECTORY)
    return given


def scratch_directory(prefix: str) -> Path:
    """A new directory for a thrown-away server's data, under ``scratch_parent()``."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=scratch_parent()))


def _has_room(directory: Path) -> bool:
    try:
        free = shutil.disk_usage(directory).free
    except OSError:  # no such file system here
        return False
    return free >= RAM_MIN_FREE_BYTES and os.access(directory, os.W_OK | os.X_OK)


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

    def execute(self, *statements: str) -> None:
        """Run ``statements`` in turn on one autocommit connection."""
        engine = self._admin_engine()
        try:
            with engine.connect() as conn:
                for sql in statements:
                    conn.execute(sa.text(sql))
        finally:
            engine.dispose()

    def create_database(self, name: str, template: str | None = None) -> str:
        create = f'CREATE DATABASE "{name}"'
        if template:
            # The embedded server runs with fsync off (its data is thrown away): copying the
            # files is fastest there. Another server (the system's) keeps fsync on, and there
            # FILE_COPY's forced checkpoints cost more than the default, which writes the
            # copy to the WAL.
            file_copy = self.embedded is not None and self.server_version >= 150000
            create += f' TEMPLATE "{template}"' + (" STRATEGY FILE_COPY" if file_copy else "")
        if self.embedded is None:
            # Another server (the system's) keeps its durability; a test's database does not
            # need it, and a commit that waits for the disk is a good part of a short test.
            self.execute(create, f'ALTER DATABASE "{name}" SET synchronous_commit = off')
        else:
            self.execute(create)
        return self.url_for(name)

    def drop_database(self, name: str) -> None:
        self.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    @contextlib.contextmanager
    def database_copy(self, template: str, prefix: str = "netmap_t") -> Iterator[str]:
        """A fresh copy of ``template`` under a unique name (its URL), dropped after."""
        name = unique_name(prefix)
        url = self.create_database(name, template=template)
        try:
            yield url
        finally:
            self.drop_database(name)

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
