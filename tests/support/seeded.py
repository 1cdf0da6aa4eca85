"""One seeded estate per test module, copied for each test that asks for it.

The planner tests seed thousands of assets and analyse both views so the planner sees a
realistic table; seeding and analysing cost seconds a test, the same seconds for every
test of a module. ``seeded_copies(seed, fixture=…)`` gives a module two fixtures instead:
``seeded_template`` (module scope: a database cloned from the migrated template, with
``seed`` run on it once) and a ``database_url`` that, for a test requesting ``fixture``,
is a fresh ``CREATE DATABASE … TEMPLATE`` copy of it (rows, statistics and visibility
maps included), and for any other test a copy of the plain template, as everywhere
else. Each test still gets a database of its own to change and commit in.

Use in a module::

    seeded_template, database_url = seeded_copies(_seed, fixture="estate")

    @pytest.fixture
    def estate(postgres_store) -> None:  # the seeded rows are already there
        ...
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from sqlalchemy.engine import make_url

from app import db
from app.search.postgres_store import PostgresStore
from tests.support.database import TestDatabaseServer
from tests.support.settings import make_settings


def seeded_copies(seed: Callable[[PostgresStore], None], *, fixture: str):
    """The module's ``seeded_template`` and ``database_url`` fixtures (see the module's
    docstring); ``seed`` runs with the process engine on the database being seeded and
    is given a PostgreSQL search store on it (its schema ensured, as the tests'
    ``postgres_store`` fixture does first)."""

    @pytest.fixture(scope="module", name="seeded_template")
    def seeded_template(
        pg_server: TestDatabaseServer, template_db: str, tmp_path_factory
    ) -> Iterator[str]:
        with pg_server.database_copy(template_db, prefix="netmap_seeded") as url:
            _seed_database(url, seed, tmp_path_factory)
            yield make_url(url).database

    @pytest.fixture(name="database_url")
    def database_url(request, pg_server: TestDatabaseServer, template_db: str) -> Iterator[str]:
        seeded = fixture in request.fixturenames
        template = request.getfixturevalue("seeded_template") if seeded else template_db
        with pg_server.database_copy(template) as url:
            yield url

    return seeded_template, database_url


def _seed_database(url: str, seed: Callable[[PostgresStore], None], tmp_path_factory) -> None:
    """Run ``seed`` on the database at ``url`` with the process engine and a store on it."""
    settings = make_settings(url, tmp_path_factory.mktemp("seeded"))
    engine = db.create_engine(url, settings.database, application_name="netmap-test-seed")
    db.set_engine(engine)
    store = PostgresStore(settings)
    try:
        store.ensure_schema()
        seed(store)
    finally:
        store.close()
        db.set_engine(None)
        # A template takes no copies while a connection to it is open.
        engine.dispose()
