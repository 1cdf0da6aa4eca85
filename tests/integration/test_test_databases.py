"""The suite's own databases (tests/support/database.py): a fresh copy of the template per
test, dropped after; commits that do not wait for the disk on any server; and the data
directory of a thrown-away server, in memory when there is room."""

from __future__ import annotations

import tempfile
from pathlib import Path

import sqlalchemy as sa

from tests.support import database
from tests.support.database import engine_for


def _scalar(url: str, sql: str):
    with engine_for(url) as engine, engine.connect() as conn:
        return conn.execute(sa.text(sql)).scalar()


def test_a_test_database_does_not_wait_for_the_disk(database_url):
    # The embedded server has it off for all; another server for the test's database only.
    assert _scalar(database_url, "SHOW synchronous_commit") == "off"


def test_each_copy_is_fresh_and_dropped_afterwards(
    pg_server: database.TestDatabaseServer, template_db
):
    with pg_server.database_copy(template_db, prefix="netmap_probe") as url:
        name = sa.engine.make_url(url).database
        with engine_for(url) as engine, engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE probe_only_here (id int)"))
        with pg_server.database_copy(template_db, prefix="netmap_probe") as other:
            assert _scalar(other, "SELECT to_regclass('probe_only_here') IS NULL") is True
            assert _scalar(other, "SELECT to_regclass('alembic_version') IS NOT NULL") is True
    exists = f"SELECT count(*) FROM pg_database WHERE datname = '{name}'"
    assert _scalar(pg_server.url_for("postgres"), exists) == 0


def test_a_data_directory_goes_where_the_variable_says(monkeypatch, tmp_path):
    monkeypatch.setenv(database.TEST_DATA_ROOT_ENV, str(tmp_path))
    directory = database.scratch_directory("netmap-probe-")
    assert directory.parent == tmp_path and directory.is_dir()


def test_without_room_in_memory_a_data_directory_is_a_temporary_one(monkeypatch, tmp_path):
    monkeypatch.delenv(database.TEST_DATA_ROOT_ENV, raising=False)
    monkeypatch.setattr(database, "RAM_DIRECTORY", tmp_path / "missing")
    assert database.scratch_parent() is None
    monkeypatch.setattr(database, "RAM_DIRECTORY", tmp_path)
    monkeypatch.setattr(database, "RAM_MIN_FREE_BYTES", 2**62)  # more than any disk holds
    assert database.scratch_parent() is None
    directory = database.scratch_directory("netmap-probe-")
    try:
        assert directory.parent == Path(tempfile.gettempdir())
    finally:
        directory.rmdir()


def test_with_room_in_memory_a_data_directory_is_there(monkeypatch, tmp_path):
    monkeypatch.delenv(database.TEST_DATA_ROOT_ENV, raising=False)
    monkeypatch.setattr(database, "RAM_DIRECTORY", tmp_path)
    monkeypatch.setattr(database, "RAM_MIN_FREE_BYTES", 1)
    assert database.scratch_parent() == str(tmp_path)
    assert database.scratch_directory("netmap-probe-").parent == tmp_path
