"""Shared fixtures: a real PostgreSQL, a fresh migrated database per test, the app.

Fixture map:
  pg_server      session: embedded server (or NETMAP_TEST_DATABASE_URL's server)
  template_db    session: a database migrated to head once, cloned per test
  database_url   test: URL of a fresh copy of the template (dropped afterwards)
  empty_database_url  test: URL of an empty, unmigrated database
  settings       test: Settings pointing at database_url (small, test-friendly values)
  engine         test: the process engine for that database (app.db.set_engine)
  app, client    test: the Flask app and its test client
  api            test: helpers to create users/scanners and act as them

Shared helpers and fixtures live in tests/support/ (never in another conftest); the
fixture modules below are registered for the whole suite:
  es_target      session: Elasticsearch simulator or NETMAP_TEST_ES_URL (support/es_target.py)
  s3_server_url, fault_proxy  moto's S3 and a fault proxy in front of it (support/s3.py)
  small_pool_app test: create_app on a one-connection pool (support/small_pool.py)
  seeded_template, database_url  a planner test module's one seeded estate, copied per
                 test that asks for it (support/seeded.py, ``seeded_copies``)
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Iterator

import pytest

from app import db
from app.config import Settings
from tests.support.api import Api
from tests.support.database import (
    TestDatabaseServer,
    scratch_directory,
    start_test_server,
    unique_name,
)
from tests.support.settings import (
    DIES_AFTER_SELF_TEST_RELEASE,
    FAULTY_RELEASE,
    RENDERER_RELEASES,
    make_settings,
)

pytest_plugins = ("tests.support.es_target", "tests.support.s3", "tests.support.small_pool")


def pytest_configure(config: pytest.Config) -> None:
    # aiosmtpd, the suite's SMTP peer, logs each connection's end at INFO from its own
    # thread, which may run after the test's output capture has ended: its lines then
    # land among the progress dots. Only its warnings are worth reading.
    logging.getLogger("mail.log").setLevel(logging.WARNING)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[TestDatabaseServer]:
    # Outside pytest's basetemp: the embedded server widens its parent directories'
    # permissions (it runs as another user when we are root), which pytest refuses
    # for its own temporary root.
    directory = scratch_directory("netmap-test-pg-")
    server = start_test_server(directory)
    yield server
    server.stop()
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session")
def template_db(pg_server: TestDatabaseServer) -> Iterator[str]:
    from app import migrations

    name = unique_name(f"netmap_tpl_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}")
    url = pg_server.create_database(name)
    migrations.upgrade(url)
    yield name
    pg_server.drop_database(name)


@pytest.fixture
def database_url(pg_server: TestDatabaseServer, template_db: str) -> Iterator[str]:
    with pg_server.database_copy(template_db) as url:
        yield url


@pytest.fixture
def empty_database_url(pg_server: TestDatabaseServer) -> Iterator[str]:
    name = unique_name("netmap_empty")
    url = pg_server.create_database(name)
    yield url
    pg_server.drop_database(name)


@pytest.fixture
def settings(database_url: str, tmp_path) -> Settings:
    return make_settings(database_url, tmp_path)


@pytest.fixture
def engine(settings: Settings) -> Iterator[object]:
    engine = db.create_engine(
        settings.database.url, settings.database, application_name="netmap-test"
    )
    db.set_engine(engine)
    yield engine
    db.set_engine(None)
    engine.dispose()


@pytest.fixture
def app(settings: Settings, engine):
    from app import close_app, create_app

    application = create_app(settings, engine=engine)
    yield application
    close_app(application)


@pytest.fixture
def client(app):
    return app.test_client()


@pytest.fixture
def api(app) -> Api:
    return Api(app)


# ---------------------------------------------------------------------------
# Renderer releases, built once per session by the real build command
# (the release names are in tests/support/settings.py).
@pytest.fixture(scope="session")
def renderer_releases(tmp_path_factory: pytest.TempPathFactory):
    """A releases directory with two real releases (built by `netmap modules build-renderer`)
    and two test-only builds that misbehave on request."""
    import subprocess
    import sys

    from app.modules.build import build_renderer_release

    directory = tmp_path_factory.mktemp("renderer-releases")
    for release_id in RENDERER_RELEASES:
        subprocess.run(
            [
                *(sys.executable, "-m", "app", "modules", "build-renderer"),
                *("--release-id", release_id, "--out", str(directory)),
            ],
            check=True,
            capture_output=True,
        )
    build_renderer_release(FAULTY_RELEASE, directory, test_faults={})
    build_renderer_release(
        DIES_AFTER_SELF_TEST_RELEASE, directory, test_faults={"exit_after_self_test": True}
    )
    return directory
